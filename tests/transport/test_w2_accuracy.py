"""W2 to its stated accuracy where the distances are far below the coordinates.

References: scipy's assignment on costs built by differences (integer weights become repeated tokens),
exact decimal arithmetic on the given floats, and the expanded costs |x|² + |y|² − 2⟨x,y⟩ computed here to show
that each input below defeats them.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

from lowtemp.model import projection
from lowtemp.transport import w2 as transport

HYP = settings(max_examples=60, deadline=None)


def _by_differences(X, Y):
    return np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=-1)


def _expanded(X, Y):
    """The costs as |x|² + |y|² − 2⟨x,y⟩: what cancellation leaves of them."""
    C = np.sum(X**2, axis=1)[:, None] + np.sum(Y**2, axis=1)[None, :] - 2.0 * (X @ Y.T)
    return np.maximum(C, 0.0)


def _assignment_w2(X, Y, kx, ky, cost=_by_differences):
    """W2 between Σ kx_i δ_{x_i} and Σ ky_j δ_{y_j} (Σkx = Σky = K, integers) by an assignment of K tokens a side
    (an integer-mass problem has an integer optimal plan)."""
    Xr, Yr = np.repeat(X, kx, axis=0), np.repeat(Y, ky, axis=0)
    C = cost(Xr, Yr)
    scale = float(np.max(C)) or 1.0
    r, c = linear_sum_assignment(C / scale)
    return math.sqrt(math.fsum(C[r, c].tolist()) / len(Xr))


def _cloud_pair(seed, n, m, d, offset, spread):
    rng = np.random.default_rng(seed)
    shift = offset * rng.standard_normal(d)
    return shift + spread * rng.standard_normal((n, d)), shift + spread * rng.standard_normal((m, d)), rng


@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
    m=st.integers(1, 6),
    d=st.integers(1, 3),
    offset=st.sampled_from([0.0, 1.0, 1e4, 1e8]),
    log_spread=st.floats(-12.0, 1.0),
    weighted=st.booleans(),
)
def test_w2_equals_the_assignment_on_costs_by_differences(seed, n, m, d, offset, log_spread, weighted):
    X, Y, rng = _cloud_pair(seed, n, m, d, offset, 10.0**log_spread)
    if weighted:  # integer masses: K tokens a side once repeated
        kx = rng.integers(1, 5, n)
        ky = rng.multinomial(int(kx.sum()), np.full(m, 1.0 / m))
        a, b = kx / kx.sum(), ky / kx.sum()
    else:  # uniform weights on clouds of any sizes: lcm(n, m) tokens a side
        L = math.lcm(n, m)
        kx, ky = np.full(n, L // n), np.full(m, L // m)
        a = b = None
    expected = _assignment_w2(X, Y, kx, ky)
    value, bound = transport.w2_certified(X, Y, a, b)
    assert value == pytest.approx(expected, rel=1e-8, abs=0.0)
    assert bound <= 1e-8 * value**2 or (bound == 0.0 and value == 0.0)


def test_w2_of_clouds_far_from_the_origin():
    """Clouds of spread 0.5 at (1e8, 1e8, 1e8): the expanded costs keep nothing of them (all 0)."""
    rng = np.random.default_rng(1)
    X, Y = 1e8 + 0.5 * rng.standard_normal((5, 3)), 1e8 + 0.5 * rng.standard_normal((7, 3))
    expected = _assignment_w2(X, Y, np.full(5, 7), np.full(7, 5))
    assert expected > 0.5
    assert _assignment_w2(X, Y, np.full(5, 7), np.full(7, 5), cost=_expanded) == 0.0
    assert transport.w2(X, Y) == pytest.approx(expected, rel=1e-9)
    # the same clouds weighted
    a, b = np.array([1, 2, 3, 4, 5]) / 15, np.array([3, 1, 1, 3, 2, 2, 3]) / 15
    expected = _assignment_w2(X, Y, np.array([1, 2, 3, 4, 5]), np.array([3, 1, 1, 3, 2, 2, 3]))
    assert transport.w2(X, Y, a, b) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("spread", [1e-6, 1e-8, 1e-10, 1e-12])
def test_w2_of_clusters_far_below_the_unit(spread):
    """Clouds of spread 1e-6 … 1e-12 around a point of the unit sphere, of different sizes: the expanded costs are
    off by their rounding (u ≈ 1e-16 on W2²), and POT's absolute tolerance would stop on costs this small
    unless the clouds are rescaled first."""
    rng = np.random.default_rng(5)
    centre = np.array([0.6, 0.0, 0.8])
    X, Y = centre + spread * rng.standard_normal((4, 3)), centre + spread * rng.standard_normal((6, 3))
    expected = _assignment_w2(X, Y, np.full(4, 3), np.full(6, 2))
    got = transport.w2(X, Y)
    assert got == pytest.approx(expected, rel=1e-9)
    old = _assignment_w2(X, Y, np.full(4, 3), np.full(6, 2), cost=_expanded)
    if spread <= 1e-8:  # a few percent at 1e-8, all of it below
        assert abs(old - expected) > (0.03 if spread == 1e-8 else 0.5) * expected
    C = _by_differences(X, Y)
    unscaled = math.sqrt(transport.ot.emd2(np.full(4, 0.25), np.full(6, 1 / 6), C))
    if spread <= 1e-10:
        assert abs(unscaled - expected) > 1e-3 * expected  # the scaling is what makes the solve exact


def test_squared_euclidean_cost_is_exact_to_a_few_roundings_far_from_the_origin():
    X, Y, _ = _cloud_pair(3, 4, 5, 3, 1e8, 1e-3)
    C = transport.squared_euclidean_cost(X, Y)
    with localcontext() as ctx:
        ctx.prec = 80
        exact = [[sum((Decimal(x) - Decimal(y)) ** 2 for x, y in zip(xi, yj)) for yj in Y] for xi in X]
    rel = np.array([[abs(Decimal(C[i, j]) - exact[i][j]) / exact[i][j] for j in range(5)] for i in range(4)], float)
    assert np.max(rel) <= 7 * 2.0**-53
    assert np.max(np.abs(_expanded(X, Y) - C) / C) > 1.0  # the expansion keeps none of it


def test_the_certificate_refuses_a_plan_that_is_not_optimal(monkeypatch):
    """The network simplex's bound is a real check: a product plan (feasible, far from optimal) is refused."""
    rng = np.random.default_rng(8)
    X, Y = rng.standard_normal((6, 2)), rng.standard_normal((9, 2))
    good = transport.network_simplex(X, Y)
    assert good.certified and good.error_bound <= good.target

    def product_plan(a, b, C, max_iterations):
        return np.outer(a, b / b.sum() * a.sum()), np.zeros(len(b))

    monkeypatch.setattr(transport, "_emd", product_plan)
    bad = transport.network_simplex(X, Y)
    assert not bad.certified
    assert bad.error_bound >= bad.value**2 - good.value**2
    with pytest.raises(transport.TransportNotConverged, match="not certified"):
        transport.w2(X, Y)


def test_w2_of_equal_weighted_measures_is_an_exact_zero():
    X = np.random.default_rng(2).standard_normal((5, 3))
    w = np.array([1.0, 2.0, 3.0, 4.0, 5.0]) / 15
    value, bound = transport.w2_certified(X, X[::-1], w, w[::-1])
    assert value == 0.0 and bound == 0.0


@pytest.mark.parametrize("bad", [-1, 0, 2.5, True, "10", np.float64(3.0)])
def test_max_iterations_is_validated_by_name(bad):
    X = np.random.default_rng(0).standard_normal((4, 2))
    with pytest.raises(ValueError, match="max_iterations"):
        transport.w2(X, X[:3], max_iterations=bad)
    with pytest.raises(ValueError, match="max_iterations"):
        transport.network_simplex(X, X, max_iterations=bad)


# ------------------------------------------------------------------ the two-atom closed form
def _unit_tokens_near(rng, sign, u, spread, n):
    """n unit tokens at distance about `spread` from sign·u."""
    X = sign[:, None] * u + spread * rng.standard_normal((n, u.size))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _decimal_two_atoms(X, u, k):
    """W2 in exact decimal arithmetic: the k tokens of largest ⟨x,u⟩ to +u, the others to −u."""
    order = np.argsort(-(X @ u), kind="stable")
    with localcontext() as ctx:
        ctx.prec = 60
        total = Decimal(0)
        for rank, i in enumerate(order):
            s = 1 if rank < k else -1
            total += sum((Decimal(x) - s * Decimal(c)) ** 2 for x, c in zip(X[i], u))
        return float((total / len(X)).sqrt())


def _expanded_two_atoms(X, u, k):
    """The expansion mean|x|² + 1 + 2·mean⟨x,u⟩ − 4·(1/N)Σ_{top k}⟨x,u⟩."""
    n = len(X)
    c = np.sort(X @ u)[::-1]
    sq = np.mean(np.sum(X**2, axis=1)) + 1.0 + 2.0 * np.mean(c) - 4.0 * np.sum(c[:k]) / n
    return math.sqrt(max(sq, 0.0))


@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 20),
    d=st.integers(2, 4),
    log_spread=st.floats(-12.0, -1.0),
    plus_fraction=st.floats(0.0, 1.0),
)
def test_w2_two_atoms_to_a_few_roundings_at_any_spread(seed, n, d, log_spread, plus_fraction):
    """Tokens at distance 1e-12 … 0.1 from ±u, the masses of Π_♯ρ0 (counts over N): exact to a few roundings of
    the given coordinates."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    k = int(round(plus_fraction * n))
    sign = np.where(np.arange(n) < k, 1.0, -1.0)
    X = _unit_tokens_near(rng, sign, u, 10.0**log_spread, n)
    masses = projection.two_atom_masses(X, u)
    expected = _decimal_two_atoms(X, u, k)
    assert transport.w2_two_atoms(X, u, masses) == pytest.approx(expected, rel=1e-13, abs=0.0)


@pytest.mark.parametrize("spread", [1e-6, 1e-8, 1e-10, 1e-12])
def test_w2_two_atoms_where_the_expansion_fails(spread):
    rng = np.random.default_rng(4)
    u = np.array([0.48, 0.6, 0.64])
    sign = np.array([1.0] * 7 + [-1.0] * 5)
    X = _unit_tokens_near(rng, sign, u, spread, 12)
    expected = _decimal_two_atoms(X, u, 7)
    got = transport.w2_two_atoms(X, u, projection.two_atom_masses(X, u))
    assert got == pytest.approx(expected, rel=1e-13)
    old_error = abs(_expanded_two_atoms(X, u, 7) - expected) / expected
    assert old_error > (1e-7 if spread == 1e-6 else 0.1)


def test_w2_two_atoms_splits_a_token_between_the_atoms():
    """Masses that are not whole tokens: the split token's share goes to each atom."""
    u = np.array([1.0, 0.0])
    X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # token 0 to +u, 1/4 of token 1 (at 90°) to +u and 3/4 to −u, token 2 to −u: W2² = (0.25·2 + 0.75·2)/3
    assert transport.w2_two_atoms(X, u, np.array([1.25, 1.75])) == pytest.approx(math.sqrt(2.0 / 3.0), rel=1e-15)
    weighted = transport.w2(X, np.stack([u, -u]), b=np.array([1.25, 1.75]) / 3)
    assert weighted == pytest.approx(math.sqrt(2.0 / 3.0), rel=1e-12)


def test_w2_two_atoms_refuses_masses_that_are_not_two_non_negative_numbers():
    u = np.array([1.0, 0.0])
    for bad in ([1.0], [-1.0, 2.0], [0.0, 0.0], [np.nan, 1.0]):
        with pytest.raises(ValueError, match="masses"):
            transport.w2_two_atoms(np.array([[1.0, 0.0]]), u, np.array(bad))


# ------------------------------------------------------------------ scale of the weights, shapes, missing values


def _cloud(n=6, d=3, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.mark.parametrize("scale", [1e-320, 1e-300, 1e-200, 1e-150, 1e20, 1e300, 1e308])
def test_weights_of_any_scale_give_the_w2_of_the_normalised_measures(scale):
    """W2 depends on the normalised measures only: weights all of 1e-300 (on which POT crashed the process) or 1e308
    (which POT called infeasible) give the uniform clouds' W2, against the assignment by differences."""
    X, Y = _cloud(seed=1), _cloud(seed=2)
    expected = _assignment_w2(X, Y, np.ones(6, int), np.ones(6, int))
    assert transport.w2(X, Y, a=[scale] * 6, b=[scale] * 6) == pytest.approx(expected, rel=1e-12)


def test_weights_of_different_totals_are_refused_at_any_scale():
    X, Y = _cloud(seed=1), _cloud(seed=2)
    with pytest.raises(ValueError, match="same total mass"):
        transport.w2(X, Y, a=[1e308] * 6, b=[1e307] * 6)
    with pytest.raises(ValueError, match="same total mass"):
        transport.w2(X, Y, a=[1.0] * 6, b=[1.0 + 1e-6] * 6)


def test_w2_two_atoms_with_masses_near_overflow():
    """Masses whose sum overflows (1.5e308 + 1e308) give the W2 of their ratio, not of all mass at −u."""
    X, u = _cloud(), np.array([0.0, 0.0, 1.0])
    assert transport.w2_two_atoms(X, u, [1.5e308, 1e308]) == transport.w2_two_atoms(X, u, [1.5, 1.0])
    assert transport.w2_two_atoms(X, u, [1e308, 1e308]) == transport.w2_two_atoms(X, u, [1.0, 1.0])


E1 = np.array([[0.0], [0.0], [1.0]])
E2 = np.eye(3)[:, :2]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda X: projection.distance_to_eigenspace(X[:3], E1[:, 0]), r"E must be a \(3, k\) basis"),
        (lambda X: projection.distance_to_eigenspace(X, 2 * E2), "E's columns are not orthonormal"),
        (lambda X: projection.distance_to_eigenspace(X, np.eye(4)[:, :2]), r"E must be a \(3, k\) basis"),
        (lambda X: projection.distance_to_eigenspace(X[0], E2), "X must be"),
        (lambda X: projection.distance_to_eigenspace(X * np.inf, E2), "X has an infinite coordinate"),
        (lambda X: transport.w2_to_projection(X, X[::-1], 2 * E1), "E1's columns are not orthonormal"),
        (lambda X: transport.w2_to_projection(X, X[::-1], E1[:, 0]), r"E1 must be a \(3, k\) basis"),
        (lambda X: transport.w2_to_projection(X, np.vstack([X[:5], [[np.nan, 0, 0]]]), E1), "finite initial tokens"),
        (lambda X: transport.w2_to_projection(X, np.tile([[1.0, 0, 0]], (6, 1)), E1), "a token on E1⊥"),
        (lambda X: transport.w2_two_atoms(np.zeros((0, 3)), E1[:, 0], [0.5, 0.5]), "at least one token"),
        (lambda X: transport.w2_two_atoms(X[0], E1[:, 0], [0.5, 0.5]), "X must be"),
        (lambda X: transport.w2_two_atoms(X, np.array([0.0, 1.0]), [0.5, 0.5]), r"u must be a \(3, k\) basis"),
        (lambda X: transport.w2_two_atoms(X, 2 * E1[:, 0], [0.5, 0.5]), "u's columns are not orthonormal"),
        (lambda X: transport.w2_two_atoms(X * np.inf, E1[:, 0], [0.5, 0.5]), "X has an infinite coordinate"),
    ],
)
def test_distances_to_eigenspaces_refuse_what_would_answer_another_question(call, message):
    """A 1-D E, a basis that is not orthonormal (2u), another dimension, no token, an infinite coordinate, NaN
    initial tokens, a token on E1⊥: each gave a number for another subspace or measure, or a bare numpy error."""
    with pytest.raises(ValueError, match=message):
        call(_cloud())


def test_a_cloud_with_a_missing_token_has_no_distance():
    """NaN marks a snapshot a solver did not reach: its distances are NaN, never a number."""
    X = _cloud()
    X[2] = np.nan
    assert math.isnan(transport.w2_two_atoms(X, E1[:, 0], [0.5, 0.5]))
    assert math.isnan(transport.w2_to_projection(X, _cloud(seed=3), E1))
    assert math.isnan(transport.w2_to_projection(X, _cloud(seed=3), E2))  # the exact solve's path too
    assert math.isnan(float(projection.distance_to_eigenspace(X, E2)))
