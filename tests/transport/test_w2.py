"""Exact W2: against the assignment problem, closed forms and invariants."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_unit
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

from lowtemp.model import projection
from lowtemp.transport import w2 as transport

HYP = settings(max_examples=40, deadline=None)


def _assignment_w2(X, Y):
    C = np.array([[np.sum((x - y) ** 2) for y in Y] for x in X])
    r, c = linear_sum_assignment(C)
    return np.sqrt(np.mean(C[r, c]))


@HYP
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(1, 12), d=st.integers(1, 4), sphere=st.booleans())
def test_w2_equals_linear_sum_assignment_for_equal_uniform_clouds(seed, N, d, sphere):
    rng = np.random.default_rng(seed)
    if sphere and d >= 2:
        X, Y = random_unit(rng, N, d), random_unit(rng, N, d)
    else:
        X, Y = rng.standard_normal((N, d)), 2.0 * rng.standard_normal((N, d)) + 0.5
    expected = _assignment_w2(X, Y)
    assert transport.w2(X, Y) == pytest.approx(expected, rel=1e-9, abs=1e-7)


@HYP
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(1, 15), M=st.integers(1, 15), d=st.integers(2, 4))
def test_w2_symmetric_zero_on_identical_and_bounded_by_coupling(seed, N, M, d):
    rng = np.random.default_rng(seed)
    X, Y = random_unit(rng, N, d), random_unit(rng, M, d)
    w_xy, w_yx = transport.w2(X, Y), transport.w2(Y, X)
    assert w_xy == pytest.approx(w_yx, rel=1e-10, abs=1e-8)
    assert 0.0 <= w_xy <= 2.0 + 1e-12  # chordal diameter of the sphere
    assert transport.w2(X, X) < 1e-7
    assert transport.w2(X, X[rng.permutation(N)]) < 1e-7
    Z = random_unit(rng, N, d)
    assert transport.w2(X, Z) <= transport.synchronous_coupling(X, Z) + 1e-12


@HYP
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(1, 8), d=st.integers(2, 3))
def test_w2_triangle_inequality(seed, N, d):
    rng = np.random.default_rng(seed)
    X, Y, Z = (random_unit(rng, N, d) for _ in range(3))
    assert transport.w2(X, Z) <= transport.w2(X, Y) + transport.w2(Y, Z) + 1e-9


def test_w2_is_distance_not_its_square():
    """Two single points at chordal distance 2 (antipodes): W2 = 2, not 4."""
    u = np.array([[1.0, 0.0, 0.0]])
    assert transport.w2(u, -u) == pytest.approx(2.0, rel=1e-14)
    # translation by a vector: W2 between a cloud and its translate is the translation length
    X = random_unit(np.random.default_rng(0), 6, 3)
    assert transport.w2(X, X + np.array([0.3, 0.4, 0.0])) == pytest.approx(0.5, rel=1e-12)


def test_synchronous_coupling_formula():
    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((7, 3)), rng.standard_normal((7, 3))
    expected = np.sqrt(np.mean([np.sum((x - y) ** 2) for x, y in zip(X, Y)]))
    assert transport.synchronous_coupling(X, Y) == pytest.approx(expected, rel=1e-14)


def test_squared_euclidean_cost_is_nonnegative_and_exact():
    rng = np.random.default_rng(3)
    X, Y = rng.standard_normal((5, 4)), rng.standard_normal((6, 4))
    C = transport.squared_euclidean_cost(X, np.vstack([Y, X]))
    naive = np.array([[np.sum((x - y) ** 2) for y in np.vstack([Y, X])] for x in X])
    np.testing.assert_allclose(C, naive, atol=1e-12)
    assert np.all(C >= 0)


def test_w2_raises_when_solver_stops_early():
    rng = np.random.default_rng(2)
    X, Y = rng.standard_normal((30, 3)), rng.standard_normal((30, 3))
    with pytest.raises(transport.TransportNotConverged):
        transport.w2(X, Y, max_iterations=2)


# ------------------------------------------------------------------ two-atom closed forms
def _cap_cloud(rng, u, theta, n):
    """n tokens at angle θ from the unit vector u, random azimuths (d = len(u))."""
    v = rng.standard_normal((n, u.size))
    v -= np.outer(v @ u, u)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return np.cos(theta) * u + np.sin(theta) * v


@HYP
@given(
    seed=st.integers(0, 2**32 - 1), theta=st.floats(0.0, np.pi / 2 - 1e-3), n=st.integers(1, 30), d=st.integers(2, 4)
)
def test_w2_two_atoms_closed_form_single_atom(seed, theta, n, d):
    """All tokens at angle θ from u on the + side, all mass at +u: W2 = 2 sin(θ/2)."""
    rng = np.random.default_rng(seed)
    u = random_unit(rng, d)
    X = _cap_cloud(rng, u, theta, n)
    expected = 2.0 * np.sin(theta / 2.0)
    assert transport.w2_two_atoms(X, u, np.array([1.0, 0.0])) == pytest.approx(expected, rel=1e-9, abs=1e-7)
    # W2 to Π_♯ρ0 with ρ0 = the same cloud: all of Π_♯ρ0 sits at +u
    assert transport.w2_to_projection(X, X, u[:, None]) == pytest.approx(expected, rel=1e-9, abs=1e-7)
    # and the general solver agrees
    assert transport.w2(X, u[None, :]) == pytest.approx(expected, rel=1e-9, abs=1e-7)


@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 25),
    d=st.integers(2, 4),
    m_plus=st.floats(0.0, 1.0),
    scale=st.floats(0.1, 10.0),
)
def test_w2_two_atoms_equals_weighted_exact_solve(seed, n, d, m_plus, scale):
    rng = np.random.default_rng(seed)
    u = random_unit(rng, d)
    X = random_unit(rng, n, d)
    targets = np.stack([u, -u])
    expected = transport.w2(X, targets, b=np.array([m_plus, 1.0 - m_plus]))
    # masses need not be normalised
    got = transport.w2_two_atoms(X, u, scale * np.array([m_plus, 1.0 - m_plus]))
    assert got == pytest.approx(expected, rel=1e-8, abs=1e-7)


@HYP
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 25), d=st.integers(2, 4))
def test_w2_to_projection_dim1_equals_exact_solve_against_projected_cloud(seed, n, d):
    rng = np.random.default_rng(seed)
    u = random_unit(rng, d)
    X0 = random_unit(rng, n, d)
    X = random_unit(rng, n, d)
    E1 = u[:, None]
    target = projection.projection_map(X0, E1)  # atoms ±u, one per initial token
    assert transport.w2_to_projection(X, X0, E1) == pytest.approx(transport.w2(X, target), rel=1e-8, abs=1e-7)


def test_w2_to_projection_dim2_is_exact_solve_against_great_circle_cloud():
    rng = np.random.default_rng(4)
    E1 = np.eye(3)[:, :2]
    X0 = random_unit(rng, 20, 3)
    P = X0.copy()
    P[:, 2] = 0
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    # the projected cloud itself is at distance 0, any permutation of it too
    assert transport.w2_to_projection(P[rng.permutation(20)], X0, E1) < 1e-7
    X = random_unit(rng, 20, 3)
    assert transport.w2_to_projection(X, X0, E1) == pytest.approx(_assignment_w2(X, P), rel=1e-9)
    # W2(ρ0, Π_♯ρ0) ≤ the coupling x ↦ Π(x)
    assert transport.w2_to_projection(X0, X0, E1) <= transport.synchronous_coupling(X0, P) + 1e-12


def test_w2_of_uniform_clouds_is_the_certified_assignment(monkeypatch):
    """transport.w2 returns the certified solver's value, and refuses an uncertified one."""
    from lowtemp.transport import assignment

    rng = np.random.default_rng(4)
    X, Y = rng.standard_normal((200, 3)), rng.standard_normal((200, 3))
    assert transport.w2(X, Y) == pytest.approx(transport.w2_network_simplex(X, Y), rel=1e-9)
    real = assignment.w2_exact

    def uncertified(*args, **kw):
        res = real(*args, **kw)
        res.certified = False
        return res

    monkeypatch.setattr(assignment, "w2_exact", uncertified)
    with pytest.raises(transport.TransportNotConverged, match="not certified"):
        transport.w2(X, Y)
