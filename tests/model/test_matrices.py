"""Attention matrices and Assumption 1 (B = QᵀK invertible, A = VBᵀ with a spectral gap)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.model import matrices, seeding

I3 = np.eye(3)


# ------------------------------------------------------------------ violations
@pytest.mark.parametrize(
    "K, Q, V, match",
    [
        (np.diag([1.0, 1.0, 0.0]), I3, I3 + np.diag([1.0, 0, 0]), "singular or ill-conditioned"),
        (np.diag([1.0, 1.0, 1e-9]), I3, np.diag([2.0, 1.0, 0.5]), "singular or ill-conditioned"),
        (I3, np.diag([1.0, 1.0, 0.0]), np.diag([2.0, 1.0, 0.5]), "singular or ill-conditioned"),
        (I3, I3, np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]), "not symmetric"),
        (I3, I3, 2.0 * I3, "no spectral gap"),
        (np.diag([2.0, 2.0, 2.0]), I3, 0.5 * I3, "no spectral gap"),  # A = VBᵀ ∝ I though V, B are not I
        (I3, I3, np.array([[1.0, 0, 0], [0, np.nan, 0], [0, 0, 1]]), "NaN or Inf"),
        (np.array([[1.0, 0, 0], [0, np.inf, 0], [0, 0, 1]]), I3, I3, "NaN or Inf"),
        (np.ones((3, 2)), I3, I3, "square"),
        (I3, I3, np.ones(3), "square"),
        (I3, I3, np.eye(2), "same shape"),
        (np.eye(1), np.eye(1), np.eye(1), "dimension"),
    ],
)
def test_assumption_1_violations_name_the_condition(K, Q, V, match):
    with pytest.raises(matrices.AssumptionViolation, match=match):
        matrices.check_assumption_1(K, Q, V)


def test_condition_threshold_is_configurable():
    K = np.diag([1.0, 1.0, 1e-6])  # condition 1e6
    V = np.diag([2.0, 1.0, 0.5e6])  # A = V Bᵀ = diag(2, 1, 0.5): symmetric with a gap
    M = matrices.check_assumption_1(K, I3, V)
    assert M.sigma_max / M.sigma_min == pytest.approx(1e6)
    with pytest.raises(matrices.AssumptionViolation, match="ill-conditioned"):
        matrices.check_assumption_1(K, I3, V, max_condition=1e5)


def test_assumption_violation_is_a_value_error():
    assert issubclass(matrices.AssumptionViolation, ValueError)


def test_small_relative_asymmetry_is_tolerated_and_symmetrised():
    V = np.diag([2.0, 1.0, 0.5])
    V[0, 1] += 1e-13
    M = matrices.check_assumption_1(I3, I3, V)
    np.testing.assert_array_equal(M.A, M.A.T)


# ------------------------------------------------------------------ derived quantities
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    d=st.integers(2, 6),
    smin=st.floats(0.2, 1.0),
    ratio=st.floats(1.0, 20.0),
    data=st.data(),
)
def test_spectral_family_has_the_prescribed_spectrum_and_conditioning(seed, d, smin, ratio, data):
    mu = sorted(data.draw(st.lists(st.floats(-3, 3), min_size=d, max_size=d, unique=True)), reverse=True)
    if mu[0] - mu[1] < 1e-3:
        mu[0] = mu[1] + 0.5
    smax = smin * ratio
    M = matrices.generate_matrices(
        "spectral", d, seeding.generator(seed, "m"), eigenvalues=mu, sigma_min=smin, sigma_max=smax
    )
    np.testing.assert_allclose(M.B, M.Q.T @ M.K, atol=1e-12)
    np.testing.assert_allclose(M.V @ M.B.T, M.A, atol=1e-9 * (1 + np.abs(M.A).max()))
    np.testing.assert_allclose(M.mu, mu, atol=1e-9)
    sv = np.linalg.svd(M.B, compute_uv=False)
    assert sv.max() == pytest.approx(smax, rel=1e-9) and sv.min() == pytest.approx(smin, rel=1e-9)
    assert M.sigma_min == pytest.approx(smin, rel=1e-9) and M.sigma_max == pytest.approx(smax, rel=1e-9)
    assert M.gamma == pytest.approx(mu[0] - mu[1], abs=1e-9)
    assert M.rate_bounds == pytest.approx((M.gamma / smax, M.gamma / smin))
    assert M.E1.shape == (d, 1)
    u = M.E1[:, 0]
    np.testing.assert_allclose(M.A @ u, mu[0] * u, atol=1e-9 * (1 + abs(mu[0])))
    np.testing.assert_allclose(M.P1, np.outer(u, u), atol=1e-12)
    assert M.dim == d


def test_generate_matrices_is_reproducible_and_rejects_unknown_family():
    kw = dict(eigenvalues=[1.5, 0.5, 0.25], sigma_min=0.8, sigma_max=1.25)
    a = matrices.generate_matrices("spectral", 3, seeding.generator(1, "m"), **kw)
    b = matrices.generate_matrices("spectral", 3, seeding.generator(1, "m"), **kw)
    np.testing.assert_array_equal(a.K, b.K)
    np.testing.assert_array_equal(a.V, b.V)
    with pytest.raises(ValueError, match="unknown matrix family"):
        matrices.generate_matrices("hilbert", 3, seeding.generator(1, "m"))
    with pytest.raises(ValueError, match="length"):
        matrices.generate_matrices(
            "spectral", 3, seeding.generator(1, "m"), eigenvalues=[1.0, 0.5], sigma_min=0.8, sigma_max=1.25
        )


@pytest.mark.parametrize(
    "d, mu, nu",
    [
        (2, [1.5, 0.6], [1.2, 0.6]),
        (3, [1.5, 0.5, 0.25], [2.0, 1.0, 0.5]),
        (4, [2.0, 1.0, -0.5, 0.3], [1.0, -3.0, 0.5, 0.2]),
    ],
)
def test_end_phase_family_puts_v_leading_eigenspace_orthogonal_to_e1(d, mu, nu):
    M = matrices.generate_matrices("end_phase", d, seeding.generator(3, "ep", str(d)), eigenvalues=mu, eigenvalues_V=nu)
    np.testing.assert_allclose(M.V, M.V.T, atol=1e-12)
    np.testing.assert_allclose(M.V @ M.B.T, M.A, atol=1e-9)
    np.testing.assert_allclose(M.mu, sorted(mu, reverse=True), atol=1e-9)
    v = M.E1_V_real[:, 0]
    np.testing.assert_allclose(M.V @ v, max(nu) * v, atol=1e-9)
    assert abs(float(v @ M.E1[:, 0])) < 1e-9
    # by modulus, the leading eigenvalue is max |ν|
    lead = max(nu, key=abs)
    w = M.E1_V_modulus[:, 0]
    np.testing.assert_allclose(M.V @ w, lead * w, atol=1e-9)


def test_leading_eigenspace_general_real_part_vs_modulus():
    """V = rot(3) ⊕ 1: largest real part is 1 (e3), largest modulus is |±3i| (the e1-e2 plane)."""
    V = np.zeros((3, 3))
    V[:2, :2] = [[0.0, -3.0], [3.0, 0.0]]
    V[2, 2] = 1.0
    _, Er = matrices.leading_eigenspace_general(V, "real")
    _, Em = matrices.leading_eigenspace_general(V, "modulus")
    np.testing.assert_allclose(Er @ Er.T, np.diag([0.0, 0.0, 1.0]), atol=1e-12)
    np.testing.assert_allclose(Em @ Em.T, np.diag([1.0, 1.0, 0.0]), atol=1e-12)
    with pytest.raises(ValueError, match="by must be"):
        matrices.leading_eigenspace_general(V, "size")


def test_explicit_family_and_repeated_top_eigenvalue():
    M = matrices.generate_matrices(
        "explicit", 3, np.random.default_rng(0), K=I3.tolist(), Q=I3.tolist(), V=np.diag([2.0, 2.0, 1.0]).tolist()
    )
    assert M.E1.shape == (3, 2)
    assert M.gamma == pytest.approx(1.0)
    np.testing.assert_allclose(M.E1 @ M.E1.T, np.diag([1.0, 1.0, 0.0]), atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(2, 6))
def test_random_orthogonal_is_orthogonal(seed, d):
    Q = matrices.random_orthogonal(d, np.random.default_rng(seed))
    np.testing.assert_allclose(Q.T @ Q, np.eye(d), atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), shear=st.floats(0.1, 3.0), angle=st.floats(0.0, 90.0), d=st.integers(2, 5))
def test_end_phase_family_with_non_symmetric_V(seed, shear, angle, d):
    """V = S diag(ν) S⁻¹ is not symmetric, has the real spectrum ν and the leading eigenvector at angle_V to
    E1(A); VBᵀ = A holds to rounding (checked here independently of check_assumption_1)."""
    mu = np.linspace(1.5, 0.3, d)
    nu = np.linspace(1.2, 0.4, d)
    M = matrices.generate_matrices(
        "end_phase",
        d,
        np.random.default_rng(seed),
        eigenvalues=mu,
        eigenvalues_V=nu,
        angle_V=angle,
        V_shear=shear,
        max_condition_B=1e12,
    )
    assert not np.allclose(M.V, M.V.T)
    np.testing.assert_allclose(np.sort(np.linalg.eigvals(M.V).real)[::-1], nu, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(np.linalg.eigvals(M.V).imag, 0.0, atol=1e-8)
    A = M.V @ M.B.T
    np.testing.assert_allclose(A, A.T, atol=1e-9 * np.abs(A).max())
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh((A + A.T) / 2))[::-1], mu, rtol=1e-8)
    v = M.E1_V_real[:, 0]
    u = M.E1[:, 0]
    assert np.degrees(np.arccos(min(1.0, abs(u @ v)))) == pytest.approx(angle, abs=1e-5)


def test_end_phase_family_with_negative_largest_modulus_eigenvalue():
    M = matrices.generate_matrices(
        "end_phase", 3, np.random.default_rng(3), eigenvalues=[1.5, 0.6, 0.5], eigenvalues_V=[1.2, 0.6, -1.5]
    )
    lam = np.linalg.eigvals(M.V)
    assert lam[np.argmax(np.abs(lam))].real == pytest.approx(-1.5)
    # the two leading eigenspaces are different lines: ν = 1.2's and ν = −1.5's eigenvectors
    overlap = abs(float(M.E1_V_real[:, 0] @ M.E1_V_modulus[:, 0]))
    assert overlap < 1 - 1e-6
    np.testing.assert_allclose(M.V @ M.E1_V_modulus[:, 0], -1.5 * M.E1_V_modulus[:, 0], atol=1e-10)
    np.testing.assert_allclose(M.V @ M.E1_V_real[:, 0], 1.2 * M.E1_V_real[:, 0], atol=1e-10)


def test_V_shear_zero_is_the_symmetric_family_bit_for_bit():
    kw = dict(eigenvalues=[1.5, 0.6, 0.5], eigenvalues_V=[1.2, 0.8, 0.6], angle_V=30.0)
    a = matrices.generate_matrices("end_phase", 3, np.random.default_rng(9), **kw)
    b = matrices.generate_matrices("end_phase", 3, np.random.default_rng(9), V_shear=0.0, **kw)
    for key in ("K", "Q", "V"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    np.testing.assert_allclose(a.V, a.V.T, atol=1e-15)  # symmetric up to the rounding of W diag(ν) Wᵀ
