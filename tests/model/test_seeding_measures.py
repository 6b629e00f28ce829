"""Seeded random streams and initial measures."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from conftest import random_unit
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from lowtemp.model import measures, seeding

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), stream=st.lists(names, min_size=0, max_size=3))
def test_generator_same_seed_and_stream_gives_same_numbers(seed, stream):
    a = seeding.generator(seed, *stream).standard_normal(16)
    b = seeding.generator(seed, *stream).standard_normal(16)
    np.testing.assert_array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), s1=names, s2=names)
def test_generator_different_streams_differ(seed, s1, s2):
    if s1 == s2:
        s2 = s2 + "x"
    a = seeding.generator(seed, "exp", s1).integers(0, 2**62, size=4)
    b = seeding.generator(seed, "exp", s2).integers(0, 2**62, size=4)
    assert not np.array_equal(a, b)


def test_generator_seed_and_order_matter():
    draw = lambda *args: seeding.generator(*args).integers(0, 2**62, size=4)  # noqa: E731
    assert not np.array_equal(draw(1, "a"), draw(2, "a"))
    assert not np.array_equal(draw(1, "a", "b"), draw(1, "b", "a"))
    assert not np.array_equal(draw(1, "a"), draw(1, "a", "b"))


def test_generator_is_stable_across_processes():
    """The stream name is hashed with SHA-256 (not Python's salted hash): rebuild it independently."""
    key = tuple(int.from_bytes(hashlib.sha256(s.encode()).digest()[:4], "little") for s in ("tiny", "matrices"))
    expected = np.random.default_rng(np.random.SeedSequence(7, spawn_key=key)).standard_normal(8)
    np.testing.assert_array_equal(seeding.generator(7, "tiny", "matrices").standard_normal(8), expected)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None])
def test_generator_rejects_bad_seed(bad):
    with pytest.raises(ValueError, match="root_seed"):
        seeding.generator(bad, "x")


@pytest.mark.parametrize(
    "name, params",
    [
        ("uniform", {}),
        ("vmf_mixture", {"kappas": [5.0, 1.0]}),
        ("vmf_mixture", {"kappas": [3.0], "means": [[0.0, 0.0, 2.0]]}),
        ("projected_gaussian", {"mean": [1.0, 0.0, 0.0], "scale": 0.7}),
    ],
)
def test_sample_initial_tokens_reproducible_and_on_sphere(name, params):
    a = measures.sample_initial_tokens(name, seeding.generator(5, "x"), 3, 40, 3, **params)
    b = measures.sample_initial_tokens(name, seeding.generator(5, "x"), 3, 40, 3, **params)
    c = measures.sample_initial_tokens(name, seeding.generator(6, "x"), 3, 40, 3, **params)
    assert a.shape == (3, 40, 3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_allclose(np.linalg.norm(a, axis=-1), 1.0, atol=1e-14)
    # replicas are independent draws, not copies
    assert not np.array_equal(a[0], a[1])


@pytest.mark.parametrize(
    "name, replicas, tokens, dim, params, match",
    [
        ("gaussian", 1, 2, 3, {}, "unknown initial measure"),
        ("uniform", 0, 2, 3, {}, "replicas"),
        ("uniform", 1, 2.5, 3, {}, "tokens"),
        ("vmf_mixture", 1, 4, 3, {"kappas": [-1.0]}, "kappas"),
        ("vmf_mixture", 1, 4, 3, {"kappas": [1.0, 2.0], "means": [[1, 0, 0]]}, "means"),
        ("vmf_mixture", 1, 4, 3, {"kappas": [1.0, 2.0], "weights": [0.9, 0.9]}, "weights"),
        (
            "vmf_mixture",
            1,
            4,
            3,
            {"kappas": [1.0, 2.0], "weights": [0.5, 0.50001]},
            r"weights must sum to 1 \(to 1\.5e-08\)",
        ),
        ("vmf_mixture", 1, 4, 3, {"kappas": [1e300]}, r"kappas must be finite numbers in \[0, 1e\+12\]"),
        ("vmf_mixture", 1, 4, 3, {"kappas": [float("nan")]}, "kappas"),
        ("atoms", 1, 4, 3, {"points": [[1, 0, 0], [0, 1, 0]], "weights": [0.5, 0.50001]}, "weights must sum to 1"),
        ("projected_gaussian", 1, 4, 3, {"mean": [1, 0], "scale": 1.0}, "mean"),
        ("projected_gaussian", 1, 4, 3, {"mean": [1, 0, 0], "scale": 0.0}, "scale"),
    ],
)
def test_sample_initial_tokens_rejects_bad_parameters(name, replicas, tokens, dim, params, match):
    with pytest.raises(ValueError, match=match):
        measures.sample_initial_tokens(name, np.random.default_rng(0), replicas, tokens, dim, **params)


def _mean_resultant_length(kappa, d):
    """A_d(κ) = I_{d/2}(κ) / I_{d/2-1}(κ) = E⟨μ, x⟩ under vMF(μ, κ) on S^{d-1}."""
    return special.ive(d / 2, kappa) / special.ive(d / 2 - 1, kappa)


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("kappa", [0.5, 4.0, 40.0])
def test_von_mises_fisher_mean_matches_bessel_ratio(d, kappa):
    rng = np.random.default_rng(100 + d)
    mu = random_unit(rng, d)
    n = 40_000
    X = measures.von_mises_fisher(rng, mu, kappa, n)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-12)
    w = X @ mu
    se = w.std() / np.sqrt(n)
    assert abs(w.mean() - _mean_resultant_length(kappa, d)) < 5 * se + 1e-12
    # the tangential part has no preferred direction: the mean vector is A_d(κ) μ
    mean_vec = X.mean(axis=0)
    se_vec = X.std(axis=0) / np.sqrt(n)
    assert np.all(np.abs(mean_vec - _mean_resultant_length(kappa, d) * mu) < 5 * se_vec + 1e-12)


@pytest.mark.parametrize("d", [2, 3])
def test_von_mises_fisher_is_accurate_up_to_kappa_max(d):
    """At κ = KAPPA_MAX, the largest κ the config accepts, the sampler still gets E[1 − w] = (d − 1)/(2κ)
    right (κ(1 − w) → Gamma((d − 1)/2), relative standard deviation of the mean √(2/((d − 1) n)));
    the mixture's weights are the draw's own tolerance: a sum off by less passes numpy's choice."""
    kappa, n = measures.KAPPA_MAX, 20_000
    rng = np.random.default_rng(7 + d)
    w = measures._vmf_cosines(rng, kappa, d, n)
    expected = (d - 1) / (2 * kappa)
    assert abs(np.mean(1 - w) / expected - 1) < 5 * np.sqrt(2 / ((d - 1) * n))
    weights = [0.5, 0.5 + 0.9 * measures.WEIGHTS_SUM_TOLERANCE]
    X = measures.vmf_mixture(rng, 1, 8, d, kappas=[1.0, kappa], weights=weights)
    np.testing.assert_allclose(np.linalg.norm(X, axis=-1), 1.0, atol=1e-12)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_uniform_and_kappa_zero_have_isotropic_second_moment(d):
    """E[x xᵀ] = I/d and E[x] = 0 on the uniform sphere; vMF with κ = 0 is uniform too."""
    n = 40_000
    for X in (
        measures.uniform(np.random.default_rng(d), 1, n, d)[0],
        measures.von_mises_fisher(np.random.default_rng(d + 10), np.eye(d)[0], 0.0, n),
    ):
        np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=5 / np.sqrt(n))
        np.testing.assert_allclose(X.T @ X / n, np.eye(d) / d, atol=5 / np.sqrt(n))


def test_vmf_mixture_weights_and_means():
    means = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    X = measures.vmf_mixture(
        np.random.default_rng(3), 2, 20_000, 3, kappas=[50.0, 50.0], means=means, weights=[0.25, 0.75]
    )
    frac_up = np.mean(X[..., 2] > 0, axis=1)
    np.testing.assert_allclose(frac_up, 0.25, atol=0.015)


def test_assumption_2_moment_matches_naive():
    rng = np.random.default_rng(7)
    X = random_unit(rng, 2, 50, 3)
    E1 = np.eye(3)[:, :1]
    got = measures.assumption_2_moment(X, E1, p=0.5)
    naive = [np.mean([abs(x[0]) ** -0.5 for x in Xr]) for Xr in X]
    np.testing.assert_allclose(got, naive, rtol=1e-12)


# ------------------------------------------------------------------ measures outside Assumption 3
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("angle", [20.0, 90.0, 150.0, 180.0])
def test_cap_is_the_uniform_measure_conditioned_on_the_cap(d, angle):
    """Against rejection sampling from the uniform sphere (independent of the inverse-CDF sampler)."""
    from scipy import stats

    rng = np.random.default_rng(int(10 * d + angle))
    center = random_unit(rng, d)
    X = measures.cap(rng, 2, 4000, d, center=3.0 * center, angle=angle)[1]  # any positive multiple of the center
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-12)
    cos_angle = np.cos(np.radians(angle))
    assert np.all(X @ center >= cos_angle - 1e-12)
    U = random_unit(rng, 400_000, d)
    ref = U[U @ center >= cos_angle][:20_000]
    assert stats.ks_2samp(X @ center, ref @ center).pvalue > 1e-3
    # the direction orthogonal to the center is uniform: a fixed tangent coordinate matches too
    e = np.linalg.qr(np.column_stack([center, rng.standard_normal((d, d - 1))]))[0][:, 1]
    assert stats.ks_2samp(X @ e, ref @ e).pvalue > 1e-3
    if d == 3:  # Archimedes: the height is uniform on [cos θ, 1]
        assert stats.kstest(X @ center, stats.uniform(cos_angle, 1 - cos_angle).cdf).pvalue > 1e-3


def test_atoms_draw_the_given_points_with_their_weights():
    points = [[2.0, 0.0, 0.0], [0.0, 0.0, -1.0]]
    X = measures.sample_initial_tokens(
        "atoms", np.random.default_rng(4), 2, 20_000, 3, points=points, weights=[0.3, 0.7], positive_density=False
    )
    assert {tuple(x) for x in X.reshape(-1, 3)} == {(1.0, 0.0, 0.0), (0.0, 0.0, -1.0)}
    np.testing.assert_allclose(np.mean(X[..., 0] == 1.0, axis=1), 0.3, atol=0.015)
    E1 = np.eye(3)[:, :1]
    np.testing.assert_array_equal(measures.atoms_on_E1_complement(points, E1), [1])
    assert measures.atoms_on_E1_complement([[1e-3, 1.0, 0.0]], E1).size == 0  # close to E1⊥ is not on it


@pytest.mark.parametrize(
    "name, params, positive",
    [
        ("uniform", {}, True),
        ("vmf_mixture", {"kappas": [50.0]}, True),
        ("projected_gaussian", {"mean": [5, 0, 0], "scale": 0.1}, True),
        ("cap", {"center": [0, 0, 1], "angle": 179.9}, False),
        ("cap", {"center": [0, 0, 1], "angle": 180}, True),
        ("atoms", {"points": [[1, 0, 0]]}, False),
    ],
)
def test_which_measures_have_a_positive_density(name, params, positive):
    assert measures.has_positive_density(name, params) is positive


@pytest.mark.parametrize(
    "params, match",
    [
        ({"center": [0, 0], "angle": 30}, "center must be a vector of length 3"),
        ({"center": [0, 0, 0], "angle": 30}, "center: a vector is zero"),
        ({"center": [0, 0, 1], "angle": 0}, r"angle must be in \(0, 180\]"),
    ],
)
def test_cap_rejects_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        measures.cap(np.random.default_rng(0), 1, 4, 3, **params)


@given(exponent=st.integers(min_value=-320, max_value=305), d=st.integers(min_value=2, max_value=6))
@settings(max_examples=60, deadline=None)
def test_normalise_gives_unit_rows_at_any_scale(exponent, d):
    """Rows of norm 10^k for k from the subnormals to near overflow come out finite unit vectors with the direction
    they have (against the row scaled to norm ~1 by an exact power of two); at ordinary scales the result is x/|x|
    bit for bit."""
    rng = np.random.default_rng(exponent + 1000 * d)
    direction = rng.standard_normal((4, d))
    direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
    scaled = direction * 10.0**exponent
    if not np.all(np.isfinite(scaled)) or np.any(np.abs(scaled[np.abs(direction) > 1e-3]) == 0):
        return  # the scaled row itself lost its direction (overflowed, or its entries flushed to zero)
    X = measures.normalise(scaled)
    assert np.all(np.isfinite(X))
    np.testing.assert_allclose(np.linalg.norm(X, axis=-1), 1.0, atol=4e-16)
    # the reference: each row brought to norm ~1 by an exact power of two (subnormal digits kept), then divided
    shift = -np.floor(np.log2(np.max(np.abs(scaled), axis=-1, keepdims=True))).astype(int)
    exact = np.ldexp(scaled, shift)
    np.testing.assert_allclose(X, exact / np.linalg.norm(exact, axis=-1, keepdims=True), rtol=0, atol=1e-15)
    Z = rng.standard_normal((3, d))
    assert np.array_equal(measures.normalise(Z), Z / np.linalg.norm(Z, axis=-1, keepdims=True))


def test_tokens_at_the_float_floor_are_finite_and_a_collapsed_gaussian_is_refused():
    """A Gaussian of scale 1e-300 about 0 and a vMF mean of norm 1e-200 give finite unit tokens (their squares
    underflow: plain x/|x| gives NaN); a Gaussian whose spread scale/|mean| is below 1e-8 is refused, one above it
    is drawn."""
    rng = np.random.default_rng(1)
    X = measures.projected_gaussian(rng, 2, 8, 3, mean=[0.0, 0.0, 0.0], scale=1e-300)
    assert np.all(np.isfinite(X)) and np.allclose(np.linalg.norm(X, axis=-1), 1.0)
    with np.errstate(all="ignore"):
        plain = 1e-300 * rng.standard_normal(3)
        assert not np.all(np.isfinite(plain / np.linalg.norm(plain)))  # what the floor does without the rescaling
    Y = measures.von_mises_fisher(rng, np.array([1e-200, 0.0, 0.0]), 50.0, 16)
    assert np.all(np.isfinite(Y)) and np.mean(Y[:, 0]) > 0.9
    with pytest.raises(ValueError, match=r"projected_gaussian: scale 1e-09 against a mean of size 1 .* collapsed"):
        measures.projected_gaussian(rng, 1, 4, 3, mean=[1.0, 0.0, 0.0], scale=1e-9)
    assert np.unique(measures.projected_gaussian(rng, 1, 4, 3, mean=[1.0, 0.0, 0.0], scale=1e-7), axis=1).shape[1] == 4


@pytest.mark.parametrize(
    "name, params",
    [
        ("cap", {"center": [1e-320, 0, 0], "angle": 30}),
        ("atoms", {"points": [[1e-320, 0, 0], [0, 1e-310, 0]]}),
        ("vmf_mixture", {"kappas": [2.0, 3.0], "means": [[1e-320, 0, 0], [0, 0, 1e-300]]}),
    ],
)
def test_directions_at_the_float_floor_are_directions(name, params):
    """A centre, atom or mean of norm 1e-320 is the direction it points in (the config check accepts it, so the
    sampler must too), and a zero vector is refused by both with the same words."""
    X = measures.sample_initial_tokens(name, np.random.default_rng(0), 1, 16, 3, **params)
    assert np.all(np.isfinite(X)) and np.allclose(np.linalg.norm(X, axis=-1), 1.0)
    np.testing.assert_allclose(measures.directions([[1e-320, 0, 0]], "x"), [[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="x: a vector is zero"):
        measures.directions([[0.0, 0.0, 0.0]], "x")
