"""The projection map Π, Π_♯ρ0, eigenspace distances, and the zero-temperature
convergence rate (c ∈ [γ/σmax(B), γ/σmin(B)])."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_unit, resource_experiment, spectral_matrices
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.analysis import fitting
from lowtemp.dynamics import fields as dynamics
from lowtemp.dynamics import integrate
from lowtemp.model import matrices, measures, projection, seeding
from lowtemp.transport import w2 as transport

HYP = settings(max_examples=30, deadline=None)

FIT = resource_experiment()["fit"]  # the schema's defaults of the fit block


@HYP
@given(seed=st.integers(0, 2**32 - 1), R=st.integers(1, 3), N=st.integers(1, 40), d=st.integers(2, 5))
def test_two_atom_masses_match_sign_split(seed, R, N, d):
    rng = np.random.default_rng(seed)
    X = random_unit(rng, R, N, d)
    u = random_unit(rng, d)
    m = projection.two_atom_masses(X, u)
    assert m.shape == (R, 2)
    for r in range(R):
        pos = sum(1 for x in X[r] if float(np.dot(x, u)) > 0)
        neg = sum(1 for x in X[r] if float(np.dot(x, u)) < 0)
        assert m[r, 0] == pytest.approx(pos / N) and m[r, 1] == pytest.approx(neg / N)


def test_two_atom_masses_of_spectral_matrices_follow_e1(M3):
    rng = np.random.default_rng(0)
    X = random_unit(rng, 2, 500, 3)
    u = M3.E1[:, 0]
    P = projection.projection_map(X, M3.E1)
    # dim E1 = 1: Π(x) = sign(⟨x,u⟩) u, and the masses are those of the sign split
    np.testing.assert_allclose(P, np.sign(X @ u)[..., None] * u, atol=1e-14)
    m = projection.two_atom_masses(X, u)
    np.testing.assert_allclose(m[:, 0], np.mean(P @ u > 0, axis=1))
    np.testing.assert_allclose(m.sum(axis=1), 1.0)


@HYP
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(2, 6), k=st.integers(1, 5))
def test_projection_map_lands_on_e1_sphere_and_is_nearest_point(seed, d, k):
    k = min(k, d - 1)
    rng = np.random.default_rng(seed)
    E1 = np.linalg.qr(rng.standard_normal((d, d)))[0][:, :k]
    X = random_unit(rng, 2, 30, d)
    P = projection.projection_map(X, E1)
    np.testing.assert_allclose(np.linalg.norm(P, axis=-1), 1.0, atol=1e-13)
    np.testing.assert_allclose(P @ E1 @ E1.T, P, atol=1e-13)  # P1 Π(x) = Π(x): Π(x) ∈ E1
    # nearest point on E1 ∩ S: no random point of E1 ∩ S is closer
    Y = random_unit(rng, 400, k) @ E1.T
    for x, p in zip(X[0], P[0]):
        assert np.linalg.norm(x - p) <= np.min(np.linalg.norm(Y - x, axis=1)) + 1e-12


def test_projection_map_dim_e1_two_lands_on_great_circle():
    """K = Q = I, V = diag(2, 2, 1): A = V, E1 = span(e1, e2), Π_♯ρ0 lives on the equator circle."""
    M = matrices.check_assumption_1(np.eye(3), np.eye(3), np.diag([2.0, 2.0, 1.0]))
    assert M.E1.shape == (3, 2)
    assert M.gamma == pytest.approx(1.0)
    np.testing.assert_allclose(M.P1, np.diag([1.0, 1.0, 0.0]), atol=1e-14)
    X = random_unit(np.random.default_rng(1), 1, 200, 3)
    P = projection.projection_map(X, M.E1)
    np.testing.assert_allclose(P[..., 2], 0.0, atol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(P, axis=-1), 1.0, atol=1e-14)
    expected = X[..., :2] / np.linalg.norm(X[..., :2], axis=-1, keepdims=True)
    np.testing.assert_allclose(P[..., :2], expected, atol=1e-14)


def test_zero_temperature_flow_with_dim_e1_two_converges_to_great_circle():
    M = matrices.check_assumption_1(np.eye(3), np.eye(3), np.diag([2.0, 2.0, 1.0]))
    X0 = measures.vmf_mixture(np.random.default_rng(2), 1, 80, 3, kappas=[0.0])
    grid = integrate.TimeGrid(horizon=12.0, snapshots=12, dt=0.05)
    P = integrate.simulate(lambda X: dynamics.zero_temperature_field(X, M.A, M.B), X0, grid)
    target = projection.projection_map(X0, M.E1)
    # e^{sA}x0 keeps the E1-direction of x0: Π(x(t)) = Π(x0) for all t
    for k in range(P.shape[1]):
        np.testing.assert_allclose(projection.projection_map(P[:, k], M.E1), target, atol=1e-9)
    w = np.array([transport.w2_to_projection(P[0, k], X0[0], M.E1) for k in range(P.shape[1])])
    assert w[-1] < 1e-2 * w[0]
    assert np.all(w[-1] <= transport.synchronous_coupling(P[0, -1], target[0]) + 1e-12)


def test_projection_map_refuses_tokens_on_e1_perp():
    E1 = np.array([[1.0], [0.0], [0.0]])
    with pytest.raises(ValueError, match="E1"):
        projection.projection_map(np.array([[0.0, 1.0, 0.0]]), E1)


@HYP
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(2, 5), k=st.integers(1, 4))
def test_distance_to_eigenspace_equals_rms_distance_to_nearest_point(seed, d, k):
    k = min(k, d)
    rng = np.random.default_rng(seed)
    E = np.linalg.qr(rng.standard_normal((d, d)))[0][:, :k]
    X = random_unit(rng, 3, 25, d)
    got = projection.distance_to_eigenspace(X, E)
    naive = np.array(
        [np.sqrt(np.mean([np.sum((x - (E @ E.T @ x) / np.linalg.norm(E @ E.T @ x)) ** 2) for x in Xr])) for Xr in X]
    )
    np.testing.assert_allclose(got, naive, rtol=1e-9, atol=1e-7)
    if k == d:
        np.testing.assert_allclose(got, 0.0, atol=1e-7)


@HYP
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), flips=st.integers(0, 40), d=st.integers(2, 4))
def test_tokens_across_are_those_the_two_atom_plan_sends_to_the_farther_atom(seed, n, flips, d):
    """Tokens at the atoms ±u, some moved to the other atom: ``tokens_across`` counts the moved ones, and its net
    count k is what the exact W2 to Π♯ρ0 pays for, 4 each: W2² = D² + 4k/n with D the distance to E1(A) (0 here,
    every token at an atom). A snapshot with a NaN token gives NaN; dim E1 = 2 has no two atoms: NaN."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.standard_normal((d, d)))[0][:, :1]
    side0 = rng.choice([-1.0, 1.0], size=n)
    moved = rng.permutation(n) < min(flips, n)
    side = np.where(moved, -side0, side0)
    X0 = (side0[:, None] * u[:, 0])[None]  # (replica, token, dim)
    X = np.stack([X0[0], side[:, None] * u[:, 0], np.full((n, d), np.nan)])[None]  # (replica, time, token, dim)
    across, net = projection.tokens_across(X, X0, u)
    assert across[0].tolist()[:2] == [0.0, float(moved.sum())] and np.isnan(across[0, 2])
    k = abs(int(np.sum(side > 0)) - int(np.sum(side0 > 0)))
    assert net[0, 1] == k and net[0, 0] == 0.0 and np.isnan(net[0, 2])
    w = transport.w2_to_projection(X[0, 1], X0[0], u)
    assert w**2 == pytest.approx(4.0 * k / n, abs=1e-12)
    E2 = np.linalg.qr(rng.standard_normal((d, d)))[0][:, :2]
    assert np.all(np.isnan(projection.tokens_across(X, X0, E2)[0]))


def naive_moving_cost(X, X0, u, counts, moved):
    """W2² to the two atoms ±u of the cloud X repeated as ``counts`` says, were it to send j = 0 … moved tokens to
    their farther atom: each token's squared distance to its nearer atom, plus 4|⟨x,u⟩| for the j with the
    smallest |⟨x,u⟩| on the side that gained tokens since X0 (past those drawn, the cloud's largest there)."""
    Xr = np.repeat(X, counts, axis=0)
    near = np.sum((Xr - np.sign(Xr @ u)[:, None] * u) ** 2) / len(X)  # the draws at an atom add 0
    gained = np.sum(X @ u > 0) >= np.sum(X0 @ u > 0)
    heights = np.sort(np.abs([x @ u for x in Xr if (x @ u > 0) == gained]))
    largest = np.max(np.abs([x @ u for x in X if (x @ u > 0) == gained]))  # of the cloud's, drawn or not
    heights = np.concatenate([heights, np.full(moved + 1, largest)])
    return near + 4.0 * np.concatenate([[0.0], np.cumsum(heights[:moved])]) / len(X)


@pytest.mark.parametrize(("n", "lost"), [(30, False), (30, True), (1000, True)])
def test_the_cost_of_sending_tokens_is_bounded_by_a_quantile_over_resampled_clouds(n, lost):
    """``moving_cost_lower``: one set of resamples per replica (the generator's multinomial draws of n from the
    tokens and one more at an atom, in order), each resample's cost of sending j tokens that of the cloud built by
    repeating the tokens as counted, the draws at the atom adding nothing (a naive
    reference: the plan's cost token by token, the j cheapest sent), the bound their level quantile per j;
    nondecreasing in j; at j = 0 under the tokens' own squared distance to E1(A) at level 0.025; NaN at a
    snapshot with a NaN token and for a two-dimensional E1. With u's side losing tokens (``lost``) the tokens
    sent are on the other side; with 1 000 tokens only the cheapest are sorted."""
    rng = np.random.default_rng(1)
    u = np.linalg.qr(rng.standard_normal((3, 3)))[0][:, :1]
    X0 = random_unit(rng, 2, n, 3)
    X = np.stack([X0, X0], axis=1)
    shift = -0.3 if lost else 0.3  # every token pulled toward −u or +u: the count on u's side falls or rises
    X[:, 1] = X[:, 1] + shift * u[:, 0]
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    X[1, 0, 4] = np.nan
    low = projection.moving_cost_lower(X, X0, u, 0.025, np.random.default_rng(7))
    draws = np.random.default_rng(7)
    for r in range(2):
        counts = draws.multinomial(n, np.full(n + 1, 1.0 / (n + 1)), size=projection.RESAMPLES)[:, :n]
        naive = np.array([naive_moving_cost(X[r, 1], X0[r], u[:, 0], c, projection.MOVED) for c in counts])
        np.testing.assert_allclose(low[r, 1], np.quantile(naive, 0.025, axis=0), rtol=1e-10)
    assert np.all(np.diff(low[0], axis=-1) >= 0.0) and np.isnan(low[1, 0]).all() and np.isfinite(low[1, 1]).all()
    assert np.all(low[0, :, 0] < projection.distance_to_eigenspace(X[0], u) ** 2)
    E2 = np.linalg.qr(rng.standard_normal((3, 3)))[0][:, :2]
    assert np.isnan(projection.moving_cost_lower(X, X0, E2, 0.025, rng)).all()


# ------------------------------------------------------------------ convergence rate
def _zero_temperature_w2(M, X0, horizon=12.0, snapshots=60):
    grid = integrate.TimeGrid(horizon=horizon, snapshots=snapshots, dt=0.05)
    P = integrate.simulate(lambda X: dynamics.zero_temperature_field(X, M.A, M.B), X0, grid, "rk4")
    W = np.array(
        [[transport.w2_to_projection(P[r, k], X0[r], M.E1) for k in range(grid.times.size)] for r in range(X0.shape[0])]
    )
    return grid.times, W


def _bounded_away_initial(kind, M, rng):
    u = M.E1[:, 0]
    if kind == "vmf":
        return measures.vmf_mixture(rng, 3, 150, 3, kappas=[15.0, 15.0], means=[u, -u])
    X = measures.uniform(rng, 1, 2000, 3)[0]
    X = X[np.abs(X @ u) >= 0.5][:450]
    assert X.shape[0] == 450
    return X.reshape(3, 150, 3)


@pytest.mark.parametrize("seed", [0, 2])
@pytest.mark.parametrize("kind", ["vmf", "filtered_uniform"])
def test_zero_temperature_rate_inside_bounds(seed, kind):
    """Tokens bounded away from E1⊥: every token approaches ±u like e^{-γ s}, and
    ds/dt → 1/|Bᵀu|, so c = γ/|Bᵀu| ∈ [γ/σmax(B), γ/σmin(B)]."""
    M = spectral_matrices(seed)
    X0 = _bounded_away_initial(kind, M, seeding.generator(seed, "tests", "rate", kind))
    t, W = _zero_temperature_w2(M, X0)
    assert np.all(np.diff(W, axis=1) < 0)  # monotone decay
    fit = fitting.fit_decay_rate(t, W, max_residual=FIT["max_residual"], min_points=FIT["min_points"])
    lo, hi = M.rate_bounds
    assert lo <= fit.mean <= hi
    assert np.all((fit.slope >= lo) & (fit.slope <= hi))
    predicted = M.gamma / np.linalg.norm(M.B.T @ M.E1[:, 0])
    assert fit.mean == pytest.approx(predicted, rel=0.05)
    assert fit.window[1] - fit.window[0] >= 6.0  # a genuine exponential regime, not a few points


def test_uniform_initial_measure_decays_at_about_half_the_rate_early():
    """With positive density at E1⊥, tokens near the equator are slow: W2² ≈ e^{-γ s}, so on an
    early window the fitted rate is about half the per-token rate, below γ/σmax(B)."""
    M = spectral_matrices(0)
    X0 = measures.uniform(seeding.generator(0, "tests", "half-rate"), 4, 300, 3)
    t, W = _zero_temperature_w2(M, X0, horizon=4.0, snapshots=20)
    slopes = np.array([-fitting.line_fit(t, np.log(w))[0] for w in W])
    lo, _ = M.rate_bounds
    per_token = M.gamma / np.linalg.norm(M.B.T @ M.E1[:, 0])
    assert np.all(slopes < lo), (slopes, lo)
    assert 0.3 * per_token < slopes.mean() < 0.65 * per_token, (slopes, per_token)
