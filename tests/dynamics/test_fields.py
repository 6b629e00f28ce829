"""Velocity fields: finite temperature against a naive double loop, zero temperature,
ESS, equivariance, tangency, and the β → ∞ limit."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import naive_attention_field, naive_ess, naive_zero_temperature_field, random_unit, spectral_matrices
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.dynamics import fields as dynamics
from lowtemp.model import measures, seeding

HYP = settings(max_examples=40, deadline=None)


def _random_problem(seed, R, N, d):
    rng = np.random.default_rng(seed)
    X = random_unit(rng, R, N, d)
    B = rng.standard_normal((d, d))
    V = rng.standard_normal((d, d))
    return X, B, V


@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    R=st.integers(1, 2),
    N=st.integers(1, 12),
    d=st.integers(2, 5),
    beta=st.one_of(st.floats(0.0, 50.0), st.floats(50.0, 1e4)),
)
def test_attention_field_equals_naive_double_loop(seed, R, N, d, beta):
    X, B, V = _random_problem(seed, R, N, d)
    expected = naive_attention_field(X, B, V, beta)
    got = dynamics.attention_field(X, B, V, beta)
    assert got.shape == X.shape
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-10 * (1 + np.abs(V).max()))


@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    N=st.integers(2, 15),
    d=st.integers(2, 4),
    beta=st.floats(0.0, 300.0),
    block=st.integers(1, 14),
)
def test_attention_field_blocking_does_not_change_result(seed, N, d, beta, block):
    X, B, V = _random_problem(seed, 2, N, d)
    block = min(block, N - 1) if N > 1 else 1  # strictly smaller than N
    expected = naive_attention_field(X, B, V, beta)
    got = dynamics.attention_field(X, B, V, beta, block_rows=block)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-10 * (1 + np.abs(V).max()))


def test_attention_field_huge_beta_is_finite_and_picks_the_argmax():
    """β = 1e8: the softmax is an argmax; no overflow (max shift)."""
    rng = np.random.default_rng(5)
    X, B, V = random_unit(rng, 1, 9, 3), rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    F = dynamics.attention_field(X, B, V, 1e8)
    assert np.all(np.isfinite(F))
    for i in range(9):
        j = int(np.argmax([X[0, i] @ B @ X[0, k] for k in range(9)]))
        v = V @ X[0, j]
        np.testing.assert_allclose(F[0, i], v - (v @ X[0, i]) * X[0, i], atol=1e-12)


def test_attention_field_uses_qt_k_convention():
    """w_ij ∝ exp(β⟨Q x_i, K x_j⟩) when B = QᵀK."""
    rng = np.random.default_rng(11)
    d, N, beta = 3, 7, 2.5
    Q, K, V = (rng.standard_normal((d, d)) for _ in range(3))
    X = random_unit(rng, 1, N, d)
    expected = np.zeros_like(X)
    for i in range(N):
        s = np.array([beta * (Q @ X[0, i]) @ (K @ X[0, j]) for j in range(N)])
        w = np.exp(s - s.max())
        w /= w.sum()
        v = sum(w[j] * V @ X[0, j] for j in range(N))
        expected[0, i] = v - (v @ X[0, i]) * X[0, i]
    np.testing.assert_allclose(dynamics.attention_field(X, Q.T @ K, V, beta), expected, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    N=st.integers(1, 10),
    d=st.integers(2, 4),
    beta=st.floats(0.0, 100.0),
    block=st.integers(1, 10),
)
def test_effective_sample_size_equals_naive(seed, N, d, beta, block):
    X, B, _ = _random_problem(seed, 2, N, d)
    ess = dynamics.effective_sample_size(X, B, beta, block_rows=block)
    np.testing.assert_allclose(ess, naive_ess(X, B, beta), rtol=1e-10)
    assert np.all(ess >= 1 - 1e-12) and np.all(ess <= N + 1e-9)


def test_effective_sample_size_is_n_at_infinite_temperature():
    X, B, _ = _random_problem(3, 2, 17, 3)
    np.testing.assert_allclose(dynamics.effective_sample_size(X, B, 0.0), 17.0, rtol=1e-13)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), R=st.integers(1, 3), N=st.integers(1, 20), d=st.integers(2, 5))
def test_zero_temperature_field_equals_naive(seed, R, N, d):
    rng = np.random.default_rng(seed)
    X = random_unit(rng, R, N, d)
    S = rng.standard_normal((d, d))
    A = S + S.T
    B = rng.standard_normal((d, d)) + 3 * np.eye(d)
    np.testing.assert_allclose(
        dynamics.zero_temperature_field(X, A, B), naive_zero_temperature_field(X, A, B), rtol=1e-10, atol=1e-12
    )


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(2, 25), d=st.integers(2, 4), beta=st.floats(0.0, 80.0))
def test_fields_are_permutation_equivariant(seed, N, d, beta):
    rng = np.random.default_rng(seed)
    X, B, V = _random_problem(seed, 2, N, d)
    A = V @ B.T
    A = 0.5 * (A + A.T)
    perm = rng.permutation(N)
    F = dynamics.attention_field(X, B, V, beta, block_rows=max(1, N // 3))
    Fp = dynamics.attention_field(X[:, perm], B, V, beta, block_rows=max(1, N // 3))
    np.testing.assert_allclose(Fp, F[:, perm], rtol=1e-10, atol=1e-12)
    Z = dynamics.zero_temperature_field(X, A, B + 3 * np.eye(d))
    Zp = dynamics.zero_temperature_field(X[:, perm], A, B + 3 * np.eye(d))
    np.testing.assert_allclose(Zp, Z[:, perm], rtol=1e-12, atol=1e-14)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(1, 20), d=st.integers(2, 5), beta=st.floats(0.0, 100.0))
def test_fields_are_tangent_to_the_sphere(seed, N, d, beta):
    X, B, V = _random_problem(seed, 2, N, d)
    for F in (
        dynamics.attention_field(X, B, V, beta),
        dynamics.value_field(X, V),
        dynamics.zero_temperature_field(X, V + V.T, B + 3 * np.eye(d)),
    ):
        assert np.max(np.abs(np.sum(F * X, axis=-1))) < 1e-12 * (1 + np.abs(F).max())


def test_value_field_is_projected_v():
    rng = np.random.default_rng(2)
    X, V = random_unit(rng, 2, 6, 4), rng.standard_normal((4, 4))
    expected = np.array([[V @ x - (x @ V @ x) * x for x in Xr] for Xr in X])
    np.testing.assert_allclose(dynamics.value_field(X, V), expected, atol=1e-13)


# ------------------------------------------------------------------ β → ∞ limit
@pytest.mark.parametrize(
    "d, N, sampler",
    [
        (3, 6000, lambda rng, N: measures.uniform(rng, 1, N, 3)),
        (2, 6000, lambda rng, N: measures.vmf_mixture(rng, 1, N, 2, kappas=[2.0, 1.0])),
    ],
    ids=["d3-uniform", "d2-vmf"],
)
def test_finite_temperature_field_tends_to_zero_temperature_field(d, N, sampler):
    """Laplace principle: the softmax average → V Bᵀx/|Bᵀx|, so the field → P⊥ A x/|Bᵀx|.

    On β ∈ [1, 30] the temperature error (≈ 1/β for a smooth density) dominates the
    finite-N Monte Carlo floor (≈ N^{-1/2} in d = 3, lower in d = 2), so the mean
    error over tokens must fall strictly and substantially at every step of the grid.
    """
    M = spectral_matrices(4, d)
    X = sampler(seeding.generator(4, "tests", "beta-limit", str(d)), N)
    F0 = dynamics.zero_temperature_field(X, M.A, M.B)
    betas = [1.0, 3.0, 10.0, 30.0]
    err = np.array([np.mean(np.abs(dynamics.attention_field(X, M.B, M.V, b) - F0)) for b in betas])
    assert np.all(np.diff(err) < 0), err
    # each threefold increase in β removes a good share of the error
    assert np.all(err[1:] / err[:-1] < 0.7), err
    # overall at least an order of magnitude between β = 1 and β = 30
    assert err[-1] < err[0] / 10, err
