"""Fast field kernels (lowtemp.dynamics.kernels): the numba ``dense`` and low-temperature ``cap``
kernels against the float64 numpy reference ``dynamics.attention_field``, the truncation
bound of the cap kernel, the polynomial exponential, the ESS, the automatic kernel rule,
determinism across thread counts, and the pipeline/config wiring of the ``kernel`` key.

No timing assertions: speed is measured elsewhere.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from conftest import SCHEMA, random_unit, validated
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lowtemp.config import experiment, schema, validation
from lowtemp.dynamics import fields as dynamics
from lowtemp.dynamics import kernel_choice, kernels
from lowtemp.model import matrices
from lowtemp.store import checkpoint

HYP = settings(max_examples=25, deadline=None)

CLOUDS = ("gaussian", "vmf", "duplicates")
CAP_CLOUDS = CLOUDS + ("far",)


# ------------------------------------------------------------------ helpers
def _unit(G: np.ndarray) -> np.ndarray:
    return G / np.linalg.norm(G, axis=-1, keepdims=True)


def _cloud(rng: np.random.Generator, kind: str, R: int, N: int, d: int) -> np.ndarray:
    """Token clouds (R, N, d) on the sphere.

    gaussian: normalised Gaussians (uniform). vmf: one tight cluster per replica
    (concentration κ log-uniform in [1e2, 1e8]: the regime where one weight dominates
    or a handful share the mass). duplicates: a few base points, each copied with
    noise 1e-12..1e-6. far: a moderately tight cluster (used with B = −I so that Bᵀx
    points away from the query's own cluster).
    """
    if kind == "gaussian":
        return random_unit(rng, R, N, d)
    if kind == "vmf":
        sigma = 10.0 ** rng.uniform(-4.0, -1.0)  # 1/sqrt(κ)
        mu = random_unit(rng, R, 1, d)
        return _unit(mu + sigma * rng.standard_normal((R, N, d)))
    if kind == "duplicates":
        k = int(rng.integers(1, 6))
        base = random_unit(rng, R, k, d)
        X = base[:, rng.integers(0, k, size=N), :]
        return _unit(X + 10.0 ** rng.uniform(-12.0, -6.0) * rng.standard_normal((R, N, d)))
    if kind == "far":
        sigma = 10.0 ** rng.uniform(-2.0, -0.5)
        mu = random_unit(rng, R, 1, d)
        return _unit(mu + sigma * rng.standard_normal((R, N, d)))
    raise AssertionError(kind)


def _well_conditioned(rng: np.random.Generator, d: int) -> np.ndarray:
    """U diag(s) Wᵀ with random orthogonal U, W and singular values s in [0.5, 2]."""
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    W, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return U @ np.diag(rng.uniform(0.5, 2.0, size=d)) @ W.T


def _problem(seed: int, kind: str, R: int, N: int, d: int):
    rng = np.random.default_rng(seed)
    X = _cloud(rng, kind, R, N, d)
    B = -np.eye(d) if kind == "far" else _well_conditioned(rng, d)
    V = rng.standard_normal((d, d))
    return X, B, V


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got − ref| relative to max |ref|."""
    assert got.shape == ref.shape
    assert np.all(np.isfinite(got)), "non-finite entries"
    scale = np.max(np.abs(ref))
    assert scale > 0
    return float(np.max(np.abs(got - ref)) / scale)


def _naive_weights(x: np.ndarray, X: np.ndarray, B: np.ndarray, beta: float):
    """Shifted scores s_j = β xᵀBx_j − max and the unnormalised softmax weights e^{s_j} (one query)."""
    s = beta * np.array([float(x @ B @ xj) for xj in X])
    s -= s.max()
    return s, np.exp(s)


def _M():
    return matrices.generate_matrices(
        "spectral", 3, np.random.default_rng(0), eigenvalues=[1.5, 0.5, 0.25], sigma_min=0.8, sigma_max=1.25
    )


log_beta = st.floats(-2.0, 4.0)  # β = 10**log_beta, log-uniform in [1e-2, 1e4]


# ------------------------------------------------------------------ 1. dense kernel
@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(CLOUDS),
    R=st.integers(1, 3),
    N=st.integers(2, 300),
    d=st.sampled_from([2, 3]),
    lb=log_beta,
)
def test_dense_field_equals_reference(seed, kind, R, N, d, lb):
    beta = 10.0**lb
    X, B, V = _problem(seed, kind, R, N, d)
    ref = dynamics.attention_field(X, B, V, beta)
    got = kernels.dense_field(X, B, V, beta)
    assert _rel_err(got, ref) <= 1e-12


def test_dense_field_low_temperature_single_dominant_weight():
    """β = 1e4 on a vMF cluster and on near-duplicates: the regime where one weight dominates."""
    rng = np.random.default_rng(11)
    for d in (2, 3):
        for X in (
            _unit(random_unit(rng, 1, 1, d) + 1e-3 * rng.standard_normal((2, 257, d))),
            _unit(np.repeat(random_unit(rng, 2, 3, d), 40, axis=1) + 1e-9 * rng.standard_normal((2, 120, d))),
        ):
            B, V = _well_conditioned(rng, d), rng.standard_normal((d, d))
            ref = dynamics.attention_field(X, B, V, 1e4)
            assert _rel_err(kernels.dense_field(X, B, V, 1e4), ref) <= 1e-12


# ------------------------------------------------------------------ 2. cap kernel
@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(CAP_CLOUDS),
    R=st.integers(1, 2),
    N=st.integers(50, 2000),
    d=st.sampled_from([2, 3]),
    lb=st.floats(1.0, 4.0),
)
def test_cap_field_equals_dense_reference(seed, kind, R, N, d, lb):
    beta = 10.0**lb
    X, B, V = _problem(seed, kind, R, N, d)
    ref = dynamics.attention_field(X, B, V, beta)
    got, ess = kernels.cap_field(X, B, V, beta, with_ess=True)
    assert _rel_err(got, ref) <= 1e-9
    ess_ref = dynamics.effective_sample_size(X, B, beta)
    assert ess.shape == ess_ref.shape
    assert np.all(np.isfinite(ess))
    np.testing.assert_allclose(ess, ess_ref, rtol=1e-9, atol=0)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("beta", [10.0, 1e3, 1e4])
def test_cap_field_cloud_far_from_query_direction(d, beta):
    """B = −I: q_i = −x_i points away from the token's own (tight) cluster, so the row maximum
    is attained on the far side of the cluster and the cap is a large one."""
    rng = np.random.default_rng(5)
    X = _unit(random_unit(rng, 2, 1, d) + 0.02 * rng.standard_normal((2, 1500, d)))
    B, V = -np.eye(d), rng.standard_normal((d, d))
    ref = dynamics.attention_field(X, B, V, beta)
    got, ess = kernels.cap_field(X, B, V, beta, with_ess=True)
    assert _rel_err(got, ref) <= 1e-9
    np.testing.assert_allclose(ess, dynamics.effective_sample_size(X, B, beta), rtol=1e-9, atol=0)


@pytest.mark.parametrize("rho", [1.003, 1.02, 0.99])
def test_cap_field_off_the_sphere_matches_dense(rho):
    """Inside a Runge–Kutta stage the field is evaluated off the sphere (X + h k has |x| > 1;
    dynamics' docstring: the same formula as a smooth extension), and the pipeline passes the
    cap kernel to the integrator. The cap kernel must stay interchangeable with the reference
    there: finite, and within its accuracy contract."""
    M = _M()
    rng = np.random.default_rng(3)
    X = rho * random_unit(rng, 1, 2048, 3)
    beta = 1e4
    ref = dynamics.attention_field(X, M.B, M.V, beta)
    assert _rel_err(kernels.dense_field(X, M.B, M.V, beta), ref) <= 1e-12
    assert _rel_err(kernels.cap_field(X, M.B, M.V, beta), ref) <= 1e-9


# ------------------------------------------------------------------ 3. truncation bound
@HYP
@given(N=st.integers(2, 10**9), log_tail=st.floats(-25.0, -1.0))
def test_truncation_constant_bound(N, log_tail):
    tail = 10.0**log_tail
    needed = np.log(N) - np.log(tail)  # the smallest c with N·e^{−c} ≤ tail
    assume(abs(needed - 64.0) > 1e-6)
    if needed > 64.0:
        with pytest.raises(ValueError, match="64"):
            kernel_choice.truncation_constant(N, tail)
        return
    c = kernel_choice.truncation_constant(N, tail)
    assert 0.0 < c <= 64.0
    assert (N - 1) * np.exp(-c) <= tail * (1 + 1e-12)
    # not wastefully large: the bound is within a factor 2 of tight
    assert (N - 1) * np.exp(-c) >= 0.5 * tail * (1 - 1e-12)


def test_truncation_constant_raises_beyond_clamp():
    with pytest.raises(ValueError):
        kernel_choice.truncation_constant(10**6, 1e-25)  # log 1e6 + log 1e25 ≈ 71 > 64
    X = random_unit(np.random.default_rng(0), 1, 64, 3)
    with pytest.raises(ValueError):
        kernels.cap_field(X, np.eye(3), np.eye(3), 100.0, tail=1e-30)  # log 64 + 69 > 64
    assert kernel_choice.truncation_constant(10**6, 1e-12) <= 64.0


@pytest.mark.parametrize("d, beta, tail", [(3, 50.0, 1e-3), (3, 200.0, 1e-6), (2, 30.0, 1e-3), (2, 400.0, 1e-4)])
def test_cap_neglected_mass_below_tail_and_field_error_bounded(d, beta, tail):
    """With a large ``tail`` the truncation is visible: the mass of the tokens with shifted
    score < −c (computed from naive softmax weights) is ≤ tail·Z, cap_field equals the naive
    truncated sum, and |F_cap − F_dense| ≤ 2·tail·‖V‖₂ per token."""
    rng = np.random.default_rng(int(beta) + d)
    N = 400
    X = random_unit(rng, 1, N, d)
    B, V = _well_conditioned(rng, d), rng.standard_normal((d, d))
    c = kernel_choice.truncation_constant(N, tail)
    normV = np.linalg.norm(V, 2)

    F_cap = kernels.cap_field(X, B, V, beta, tail=tail)[0]
    F_dense = dynamics.attention_field(X, B, V, beta)[0]
    F_trunc = np.empty_like(F_dense)
    neglected_any = 0
    for i in range(N):
        x = X[0, i]
        s, w = _naive_weights(x, X[0], B, beta)
        Z = w.sum()
        out = s < -c
        neglected_any += int(out.sum())
        eps = w[out].sum() / Z
        assert eps <= tail
        assert eps <= (N - 1) * np.exp(-c) * (1 + 1e-12)
        keep = ~out
        f = (w[keep][:, None] * (X[0, keep] @ V.T)).sum(axis=0) / w[keep].sum()
        F_trunc[i] = f - (f @ x) * x
        err = np.linalg.norm(F_cap[i] - F_dense[i])
        assert err <= 2 * tail * normV + 1e-12
        assert err <= 2 * normV * eps / (1 - eps) + 1e-12  # the sharper, per-token bound
    assert neglected_any > 0, "the truncation should be visible in this setting"
    assert np.max(np.abs(F_cap - F_dense)) > 0
    np.testing.assert_allclose(F_cap, F_trunc, rtol=0, atol=1e-12 * np.max(np.abs(F_dense)))


# ------------------------------------------------------------------ 4. branch-free exponential
def test_exp_nonpositive_accuracy_on_grid():
    f = kernels._exp_nonpositive
    s = np.concatenate(
        [
            np.linspace(-700.0, 0.0, 2**17 + 1),
            -np.logspace(-300, np.log10(700.0), 2000),
            -np.log(2.0) * np.arange(0, 1000) / 2,
        ]
    )  # the range-reduction boundaries
    s = s[s >= -700.0]
    got = np.array([f(float(v)) for v in s])
    rel = np.abs(got / np.exp(s) - 1.0)
    assert np.max(rel) <= 5e-14, f"worst s = {s[np.argmax(rel)]}"


def test_exp_nonpositive_clamp_and_one():
    f = kernels._exp_nonpositive
    e700 = np.exp(-700.0)
    for s in (-700.0, -700.0 - 1e-9, -701.0, -1e6, -1e300, -np.inf):
        assert abs(f(s) / e700 - 1.0) <= 5e-14, s
    assert f(-1e6) == f(-700.0)
    assert f(0.0) == 1.0
    assert f(-0.0) == 1.0


def test_exp_nonpositive_scaled_is_an_exact_power_of_two_multiple():
    """The dense kernels carry weights times 2^432 (module doc): exactly the unscaled value
    times 2^432 over the whole range, so the scale cancels bit for bit in the ratios."""
    s = np.concatenate([np.linspace(-700.0, 0.0, 4097), -np.log(2.0) * np.arange(0, 1000) / 2, [-1e6]])
    scale = 2.0**kernels._ESS_EXPONENT
    for v in s:
        v = float(v)
        assert kernels._exp_nonpositive_scaled(v, kernels._ESS_EXPONENT) == kernels._exp_nonpositive(v) * scale


def test_dense_bound_shift_and_exact_max_paths_agree_with_reference():
    """Rows with 2|a|·max|x| ≤ 600 use the Cauchy–Schwarz shift, the others the exact max:
    one β on each side of the switch, and tokens off the sphere (Runge–Kutta stages)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2, 400, 3))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    X *= 1.0 + 0.02 * rng.random((2, 400, 1))
    B = np.eye(3) + 0.2 * rng.standard_normal((3, 3))
    V = rng.standard_normal((3, 3))
    for beta in (1.0, 100.0, 299.0, 301.0, 5000.0):
        ref = dynamics.attention_field(X, B, V, beta)
        got = kernels.dense_field(X, B, V, beta)
        assert np.max(np.abs(got - ref)) <= 1e-12 * np.max(np.abs(ref)), beta


# ------------------------------------------------------------------ 5. effective sample size
@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(CLOUDS),
    N=st.integers(2, 300),
    d=st.sampled_from([2, 3]),
    lb=st.floats(-1.0, 4.0),
)
def test_ess_kernels_agree(seed, kind, N, d, lb):
    beta = 10.0**lb
    X, B, V = _problem(seed, kind, 2, N, d)
    ref = kernels.ess_with_kernel(X, B, V, beta, "numpy")
    np.testing.assert_allclose(ref, dynamics.effective_sample_size(X, B, beta), rtol=0, atol=0)
    for kernel in ("dense", "cap"):
        got = kernels.ess_with_kernel(X, B, V, beta, kernel)
        assert got.shape == (2, N)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=0, err_msg=kernel)


@pytest.mark.parametrize("kernel", kernels.KERNELS)
@pytest.mark.parametrize("d", [2, 3])
def test_ess_limits(kernel, d):
    M = _M()
    rng = np.random.default_rng(4)
    X = random_unit(rng, 2, 200, d)
    B = M.B if d == 3 else _well_conditioned(rng, d)
    V = M.V if d == 3 else rng.standard_normal((d, d))
    hot = kernels.ess_with_kernel(X, B, V, 1e-9, kernel)
    np.testing.assert_allclose(hot, 200.0, rtol=1e-9)
    # distinct tokens: β large enough that every row's best score leads the runner-up by ≥ 60,
    # so one weight takes all (ESS = 1 + O(N e^{-60}))
    top2 = np.sort(np.einsum("rid,de,rje->rij", X, B, X), axis=-1)[..., -2:]
    gap = float(np.min(top2[..., 1] - top2[..., 0]))
    assert gap > 0
    cold = kernels.ess_with_kernel(X, B, V, 60.0 / gap, kernel)
    assert np.all(cold >= 1.0 - 1e-12)
    assert np.all(cold <= 1.0 + 1e-9)


def _tight_cluster(rng: np.random.Generator, R: int, N: int, d: int, width: float) -> np.ndarray:
    """R clusters of N unit vectors, each within about ``width`` (chordal) of a random centre."""
    return _unit(random_unit(rng, R, 1, d) + width * rng.standard_normal((R, N, d)))


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("beta", [200.0, 290.0])
def test_ess_and_field_when_every_score_is_far_below_the_bound_shift(d, beta):
    """B = −I on 50 tokens in a small cap: every score is ≈ −β while the dense kernel's
    Cauchy–Schwarz shift is +β (2β ≤ 600, so it does not take the exact max), so every
    shifted score is ≈ −2β and every squared weight e^{−4β} underflows. Before the weights
    were carried scaled by 2^432 the ESS came out 0/0 = NaN here; the reference says ≈ 50."""
    rng = np.random.default_rng(int(beta) + d)
    X = _tight_cluster(rng, 2, 50, d, 0.01)
    B, V = -np.eye(d), rng.standard_normal((d, d))
    ref = dynamics.effective_sample_size(X, B, beta)
    assert np.all(ref > 49.0)
    F_ref = dynamics.attention_field(X, B, V, beta)
    for kernel, fn in (("dense", kernels.dense_field), ("cap", kernels.cap_field)):
        F, ess = fn(X, B, V, beta, with_ess=True)
        assert np.all(np.isfinite(ess)), kernel
        np.testing.assert_allclose(ess, ref, rtol=1e-12, atol=0, err_msg=kernel)
        assert _rel_err(F, F_ref) <= 1e-12, kernel


#: β log-uniform over the whole tested range, or uniform over [150, 300]: with B = ±I and a
#: tight cloud that is where the dense kernel keeps the bound shift (2β·|x|² ≤ 600) while
#: every score lies ≈ 2β below it, the squares of the weights underflow partly (β ≳ 177)
#: or completely (β ≳ 186)
ess_beta = st.one_of(st.floats(-2.0, 4.0).map(lambda lb: 10.0**lb), st.floats(150.0, 300.0))


@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    R=st.integers(1, 2),
    N=st.integers(2, 300),
    d=st.sampled_from([2, 3]),
    beta=ess_beta,
    log_width=st.one_of(st.floats(-4.0, 0.0), st.just(np.inf)),
    b=st.sampled_from(["+I", "-I", "+random", "-random"]),
    stretch=st.sampled_from([0.0, 0.02]),
)
def test_ess_and_field_equal_reference_for_any_sign_of_B_and_clustering(seed, R, N, d, beta, log_width, b, stretch):
    """ESS and field of the dense and cap kernels against the numpy reference, over β, the
    cloud's width (10^log_width, or uniform on the sphere), B = ±I or ± a well-conditioned
    matrix, and tokens off the sphere by up to 2 % (Runge–Kutta stages).

    Tolerances: the kernels' exponential is within 5e-14 of e^s and a score of size β·|B|
    carries a rounding error of a few ulp of it (≤ 1e-11 at β = 1e4), so each weight is
    within ~1e-11 relative; the cap kernel also drops a mass ≤ 1e-12·Z. Z²/Σw² and Σw x/Z
    are ratios of sums of such weights, hence rtol 1e-9 on the ESS. The field is compared
    as in the rest of this file (max error relative to max |F|: 1e-12 dense, 1e-9 cap)."""
    rng = np.random.default_rng(seed)
    if np.isinf(log_width):
        X = random_unit(rng, R, N, d)
    else:
        X = _tight_cluster(rng, R, N, d, 10.0**log_width)
    X = X * (1.0 + stretch * rng.random((R, N, 1)))
    B = np.eye(d) if b.endswith("I") else _well_conditioned(rng, d)
    B = -B if b.startswith("-") else B
    V = rng.standard_normal((d, d))
    ess_ref = dynamics.effective_sample_size(X, B, beta)
    F_ref = dynamics.attention_field(X, B, V, beta)
    for kernel, fn, field_tol in (("dense", kernels.dense_field, 1e-12), ("cap", kernels.cap_field, 1e-9)):
        F, ess = fn(X, B, V, beta, with_ess=True)
        assert ess.shape == ess_ref.shape
        assert np.all(np.isfinite(ess)), kernel
        np.testing.assert_allclose(ess, ess_ref, rtol=1e-9, atol=0, err_msg=kernel)
        assert _rel_err(F, F_ref) <= field_tol, kernel


@pytest.mark.parametrize("d", [2, 3])
def test_cap_kernel_when_a_row_has_no_direction(d):
    """a_i = β Bᵀx_i = 0 (β = 0, or x_i in the kernel of a singular B): every score of row i is
    0 and every token has the same weight. The cap kernel has no cap direction there; it must
    sum every token rather than fail on a_i/|a_i|."""
    rng = np.random.default_rng(d)
    X = random_unit(rng, 1, 40, d)
    X[0, 0] = np.eye(d)[-1]
    V = rng.standard_normal((d, d))
    singular = np.diag([1.0] * (d - 1) + [0.0])
    for beta, B in ((0.0, np.eye(d)), (10.0, singular)):
        F_ref = dynamics.attention_field(X, B, V, beta)
        for fn in (kernels.dense_field, kernels.cap_field):
            F, ess = fn(X, B, V, beta, with_ess=True)
            assert _rel_err(F, F_ref) <= 1e-12
            np.testing.assert_allclose(ess, dynamics.effective_sample_size(X, B, beta), rtol=1e-12, atol=0)
        assert kernels.cap_field(X, B, V, beta, with_ess=True)[1][0, 0] == pytest.approx(40.0, rel=1e-14)


# ------------------------------------------------------------------ 6. dispatch and the automatic rule
def test_choose_kernel_documented_cases():
    """``kernel: auto``: numpy outside d = 2, 3; dense below 16384 tokens; from there a choice per evaluation."""
    assert kernel_choice.choose_kernel(1024, 4) == "numpy"
    assert kernel_choice.choose_kernel(32768, 5) == "numpy"
    for n in (2, 1024, kernel_choice.CAP_MIN_TOKENS - 1):
        assert kernel_choice.choose_kernel(n, 3) == kernel_choice.choose_kernel(n, 2) == "dense"
    for n in (kernel_choice.CAP_MIN_TOKENS, 32768, 10**6):
        assert kernel_choice.choose_kernel(n, 3) == kernel_choice.choose_kernel(n, 2) == "auto"


def _naive_box_sums(counts, lo, hi):
    out = []
    for q in range(lo.shape[0]):
        box = tuple(slice(lo[q, k], hi[q, k] + 1) for k in range(counts.ndim))
        out.append(counts[box].sum())
    return np.array(out)


@HYP
@given(d=st.integers(1, 3), G=st.integers(1, 7), seed=st.integers(0, 10**6))
def test_box_sums_against_the_naive_sum(d, G, seed):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 5, size=(G,) * d).astype(float)
    a, b = rng.integers(0, G, size=(2, 9, d))
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    np.testing.assert_array_equal(kernel_choice._box_sums(counts, lo, hi), _naive_box_sums(counts, lo, hi))


def _naive_sweep(X, B, beta, queries):
    """Tokens in the cap kernel's cell box per probe query, by looping over the tokens (the kernel's geometry with
    the exact row maximum, as the docstring of cap_sweep_fraction says)."""
    Xr = X[0]
    n, d = Xr.shape
    c = kernel_choice.truncation_constant(n)
    idx = np.unique(np.linspace(0, n - 1, min(queries, n)).astype(np.int64))
    rho = np.max(np.linalg.norm(Xr, axis=1))
    rads, qs = [], []
    for i in idx:
        a = beta * B.T @ Xr[i]
        m = max(a @ x for x in Xr)
        rads.append(np.sqrt(max(rho**2 + 1 - 2 * (m - c) / np.linalg.norm(a), 0.0)))
        qs.append(a / np.linalg.norm(a))
    h = min(max(0.5 * np.median(rads), 2 * rho / 64), 2 * rho)
    G = int(np.ceil(2 * rho / h))
    cell = lambda y: np.clip(np.floor((y + rho) / h).astype(int), 0, G - 1)  # noqa: E731
    swept = []
    for q, rad in zip(qs, rads):
        lo, hi = cell(q - rad), cell(q + rad)
        swept.append(sum(bool(np.all((cell(x) >= lo) & (cell(x) <= hi))) for x in Xr))
    return np.mean(swept) / n


@pytest.mark.parametrize(
    "d, beta, cloud",
    [(3, 1000.0, "spread"), (3, 1000.0, "clustered"), (2, 1e4, "spread"), (2, 1e4, "clustered"), (3, 10.0, "spread")],
)
def test_cap_sweep_fraction_against_a_loop_over_the_tokens(d, beta, cloud):
    rng = np.random.default_rng(4)
    X = random_unit(rng, 1, 600, d)
    if cloud == "clustered":  # two antipodal clusters of angular radius ≈ 0.02, as in the metastable phase
        X = np.where(X[..., :1] >= 0, 1.0, -1.0) * np.eye(d)[0] + 0.02 * rng.standard_normal(X.shape)
        X /= np.linalg.norm(X, axis=-1, keepdims=True)
    B = _M().B if d == 3 else np.diag([1.25, 0.8])
    got = kernel_choice.cap_sweep_fraction(X, B, beta, queries=16)
    assert got == pytest.approx(_naive_sweep(X, B, beta, 16), rel=1e-12)
    if cloud == "clustered":
        assert got >= 0.4  # a cell holds a whole cluster: the cap kernel sweeps half the cloud


@pytest.mark.parametrize(
    "d, beta, cloud, expected",
    [
        (3, 1000.0, "spread", "cap"),
        (3, 1000.0, "clustered", "dense"),
        (2, 1e4, "spread", "cap"),
        (2, 1e4, "clustered", "dense"),
        (3, 10.0, "spread", "dense"),
        (2, 1000.0, "spread", "dense"),
    ],
)
def test_choose_for_cloud_picks_what_make_bench_measured_faster(d, beta, cloud, expected):
    """The benchmark's clouds at N = 32768 (``make bench``,
    docs/decisions/0008-kernel-choice-at-run-time.md): the cap kernel measured 2–2.3× faster
    than dense on the spread clouds at d = 3, β = 1000 and d = 2, β = 10⁴, 1.2–6× slower on the clustered ones
    and at d = 2, β = 1000 (its sweep holds 12 % of the cloud), 9–19× slower at β = 10. A rule from (β, N, d)
    alone picked the slower kernel in two of these cases; the cloud's own sweep picks the faster in each."""
    rng = np.random.default_rng(6)
    n = 32768
    X = random_unit(rng, 1, n, d)
    if cloud == "clustered":
        X = np.where(X[..., :1] >= 0, 1.0, -1.0) * np.eye(d)[0] + 0.02 * rng.standard_normal(X.shape)
        X /= np.linalg.norm(X, axis=-1, keepdims=True)
    B = _M().B if d == 3 else np.diag([1.25, 0.8])
    assert kernel_choice.choose_for_cloud(X, B, beta) == expected
    assert kernel_choice.choose_for_cloud(X[:, :4096], B, beta) == "dense"  # below CAP_MIN_TOKENS: no probe


def test_auto_kernel_equals_the_dense_kernel():
    """``auto`` evaluates with cap or dense (each within 1e-12 of the other): the field and the ESS agree with the
    dense kernel's to 1e-12 on a cloud where it picks cap and one where it picks dense."""
    M = _M()
    rng = np.random.default_rng(12)
    spread = random_unit(rng, 1, 16384, 3)
    clustered = np.where(spread[..., :1] >= 0, 1.0, -1.0) * np.eye(3)[0] + 0.02 * rng.standard_normal(spread.shape)
    clustered /= np.linalg.norm(clustered, axis=-1, keepdims=True)
    picks = set()
    for X in (spread, clustered):
        picks.add(kernel_choice.choose_for_cloud(X, M.B, 3000.0))
        F, ref = kernels.field_with_kernel(X, M.B, M.V, 3000.0, "auto"), kernels.dense_field(X, M.B, M.V, 3000.0)
        assert _rel_err(F, ref) <= 1e-12
        np.testing.assert_allclose(
            kernels.ess_with_kernel(X, M.B, M.V, 3000.0, "auto"),
            kernels.ess_with_kernel(X, M.B, M.V, 3000.0, "dense"),
            rtol=1e-10,
        )
    assert picks == {"cap", "dense"}


def test_attention_field_dispatch_and_errors():
    M = _M()
    X = random_unit(np.random.default_rng(1), 2, 300, 3)
    ref = dynamics.attention_field(X, M.B, M.V, 200.0)
    for kernel in kernels.KERNELS:
        assert _rel_err(kernels.field_with_kernel(X, M.B, M.V, 200.0, kernel), ref) <= 1e-9
    with pytest.raises(ValueError, match="bogus"):
        kernels.field_with_kernel(X, M.B, M.V, 200.0, kernel="bogus")
    with pytest.raises(ValueError, match="bogus"):
        kernels.ess_with_kernel(X, M.B, M.V, 200.0, kernel="bogus")
    X4 = random_unit(np.random.default_rng(2), 1, 50, 4)
    B4, V4 = np.eye(4), np.eye(4)
    assert kernels.field_with_kernel(X4, B4, V4, 10.0, "numpy").shape == X4.shape
    for kernel in ("dense", "cap"):
        with pytest.raises(ValueError, match="numpy"):
            kernels.field_with_kernel(X4, B4, V4, 10.0, kernel)
        with pytest.raises(ValueError, match="numpy"):
            kernels.ess_with_kernel(X4, B4, V4, 10.0, kernel)
    with pytest.raises(ValueError, match="numpy"):
        kernels.dense_field(X4, B4, V4, 10.0)
    with pytest.raises(ValueError, match="numpy"):
        kernels.cap_field(X4, B4, V4, 10.0)


# ------------------------------------------------------------------ 7. determinism
@pytest.fixture
def restore_threads():
    before = numba.get_num_threads()
    yield
    numba.set_num_threads(before)


@pytest.mark.parametrize("d", [2, 3])
def test_kernels_bit_identical_across_calls_and_threads(d, restore_threads):
    rng = np.random.default_rng(9)
    X = random_unit(rng, 2, 1500, d)
    B, V, beta = _well_conditioned(rng, d), rng.standard_normal((d, d)), 500.0
    runs = {}
    for threads in (1, 2, None):
        if threads is not None:
            kernels.set_threads(threads)
        for name, fn in (("dense", kernels.dense_field), ("cap", kernels.cap_field)):
            for _ in range(2):
                runs.setdefault(name, []).append(fn(X, B, V, beta, with_ess=True))
    for name, results in runs.items():
        F0, E0 = results[0]
        for F, E in results[1:]:
            assert np.array_equal(F, F0), name
            assert np.array_equal(E, E0), name


# ------------------------------------------------------------------ 8. pipeline and config
def test_field_kernel_explicit_and_auto():
    for kernel in kernels.KERNELS:
        assert experiment.field_kernel({"dim": 3, "tokens": 32768, "kernel": kernel}) == kernel
    for N, d, expected in [
        (32768, 3, "auto"),
        (1024, 3, "dense"),
        (16384, 2, "auto"),
        (4096, 2, "dense"),
        (32768, 4, "numpy"),
    ]:
        assert experiment.field_kernel({"dim": d, "tokens": N, "kernel": "auto"}) == expected
        assert kernel_choice.choose_kernel(N, d) == expected
    with pytest.raises(KeyError):  # the default (auto) is the schema's: test_schema_kernel_defaults_to_auto
        experiment.field_kernel({"dim": 3, "tokens": 1024})


@pytest.mark.parametrize("kernel", ["auto", "numpy", "dense", "cap"])
def test_schema_accepts_kernel(test_config, kernel):
    test_config["experiments"]["tiny"]["kernel"] = kernel
    validated(test_config)
    assert test_config["experiments"]["tiny"]["kernel"] == kernel


def test_schema_kernel_defaults_to_auto(test_config):
    test_config["experiments"]["tiny"].pop("kernel", None)
    validated(test_config)
    assert test_config["experiments"]["tiny"]["kernel"] == "auto"


@pytest.mark.parametrize("kernel", ["bogus", "Dense", "", 3, None])
def test_schema_rejects_unknown_kernel(test_config, kernel):
    test_config["experiments"]["tiny"]["kernel"] = kernel
    with pytest.raises(validation.ConfigError) as info:
        schema.check_schema(test_config, SCHEMA)
    assert "kernel" in str(info.value)


def test_validate_experiment_refuses_fast_kernels_outside_d2_d3(test_config):
    exp = dict(validated(test_config)["experiments"]["tiny"])
    exp.update(
        dim=4,
        kernel="dense",
        matrices={
            "family": "spectral",
            "eigenvalues": [1.5, 0.5, 0.25, 0.1],
            "sigma_min": 0.8,
            "sigma_max": 1.25,
            "B_frames": "symmetric",
        },
    )
    with pytest.raises(validation.ConfigError, match="kernel"):
        validation.validate_experiment("tiny", exp, 7)


def test_the_field_object_evaluates_the_field_and_names_what_determines_it():
    """kernels.AttentionField gives the kernel's field and ESS; its identity (what a checkpoint fingerprints)
    changes with β, the kernel and the matrices, so a resume with another of them is refused."""
    rng = np.random.default_rng(5)
    X, B, V = random_unit(rng, 2, 80, 3), _well_conditioned(rng, 3), rng.standard_normal((3, 3))
    field = kernels.AttentionField(B, V, 50.0, "dense")
    assert np.array_equal(field(X), kernels.field_with_kernel(X, B, V, 50.0, "dense"))
    assert np.array_equal(field.effective_sample_size(X), kernels.ess_with_kernel(X, B, V, 50.0, "dense"))

    def fp(f):
        arrays, settings = f.identity()
        return checkpoint.fingerprint(*arrays, **settings)

    others = [
        kernels.AttentionField(B, V, 51.0, "dense"),
        kernels.AttentionField(B, V, 50.0, "cap"),
        kernels.AttentionField(B, 2 * V, 50.0, "dense"),
    ]
    assert fp(kernels.AttentionField(B.copy(), V.copy(), 50.0, "dense")) == fp(field)
    assert len({fp(f) for f in [field, *others]}) == 4
    zero = dynamics.ZeroTemperatureField(V @ B.T, B)
    assert np.array_equal(zero(X), dynamics.zero_temperature_field(X, V @ B.T, B))
