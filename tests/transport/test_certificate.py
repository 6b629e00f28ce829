"""The certified W2 on the inputs that make certificates lie or solvers hang: clusters of spread 1e-6…1e-15
on the sphere (W2² far below the costs between clusters), exact duplicates and permuted copies (W2 = 0),
lattices, antipodal clouds, coordinates near underflow and overflow. The truth is SciPy's
``linear_sum_assignment`` on costs computed by differences, per cluster where the clouds are clusters
(independent of POT and of the solver under test)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

from lowtemp.transport import assignment, neighbours, pricing
from lowtemp.transport import w2 as transport


def _sphere(rng, n, d):
    Z = rng.standard_normal((n, d))
    return Z / np.linalg.norm(Z, axis=1, keepdims=True)


def _cost(X, Y):
    D = X[:, None, :] - Y[None, :, :]
    return np.einsum("ijk,ijk->ij", D, D)


def _lsa_w2sq(X, Y):
    C = _cost(X, Y)
    r, c = linear_sum_assignment(C)
    return float(C[r, c].sum())


def _clusters(seed, n, d, k, spread):
    """k clusters of ``spread`` on S^(d−1), equal numbers of tokens of X and Y in each, Y's tokens shuffled;
    returns X, Y and the exact W2² (clusters far apart: the optimum matches inside each cluster)."""
    rng = np.random.default_rng(seed)
    centres = _sphere(rng, k, d)
    while k > 1 and np.min(_cost(centres, centres) + 4 * np.eye(k)) < 0.1:
        centres = _sphere(rng, k, d)
    label = np.arange(n) % k
    X = centres[label] + spread * rng.standard_normal((n, d))
    Y = centres[label] + spread * rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    total = sum(_lsa_w2sq(X[label == c], Y[label == c]) for c in range(k))
    shuffle = rng.permutation(n)
    return X, Y[shuffle], total / n


def _mixed_clusters(seed, n, d, k, spread, noise=0.1):
    """k clusters on S^(d−1) whose spreads differ (spread·10^−m, m = 0…6 drawn per cluster), Y = X plus
    noise·spread of each token's cluster, shuffled; returns X, Y and the exact W2² (per cluster)."""
    rng = np.random.default_rng(seed)
    centres = _sphere(rng, k, d)
    while k > 1 and np.min(_cost(centres, centres) + 4 * np.eye(k)) < 0.1:
        centres = _sphere(rng, k, d)
    label = np.arange(n) % k
    sp = spread * 10.0 ** (-rng.integers(0, 7, size=k))[label][:, None]
    X = centres[label] + sp * rng.standard_normal((n, d))
    Y = X + noise * sp * rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    total = sum(_lsa_w2sq(X[label == c], Y[label == c]) for c in range(k))
    return X, Y[rng.permutation(n)], total / n


def _assert_right(res, w2sq):
    """Certified, and the certified bound holds against the truth and reaches the target."""
    assert res.certified, (res.error_bound, res.target, res.value**2, w2sq)
    assert abs(res.value**2 - w2sq) <= res.error_bound, (res.value**2, w2sq, res.error_bound)
    assert res.error_bound <= assignment.REL_TOL * w2sq or res.error_bound == 0.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(8, 400),
    d=st.integers(2, 5),
    k=st.integers(1, 4),
    spread=st.sampled_from([1e-6, 1e-8, 1e-10, 1e-12, 1e-15]),
)
@example(seed=0, n=384, d=2, k=3, spread=1e-6)
def test_tiny_clusters_are_certified_right(seed, n, d, k, spread):
    X, Y, w2sq = _clusters(seed, n, d, k, spread)
    _assert_right(assignment.w2_exact(X, Y), w2sq)


def test_the_local_re_solve_adds_the_pairs_its_certificate_finds(monkeypatch):
    """Three clusters of spread 1e-6 on the circle: the tree's potentials (1e-7) leave the bound to rounding, and
    the local re-solve's shortest-path potentials are feasible on its own arcs only. Two pairs beat them by
    2.4 % of W2² in all; without adding them (one local round) the result is left uncertified (and fell back),
    with them it is certified right."""
    X, Y, w2sq = _clusters(0, 384, 2, 3, 1e-6)
    _assert_right(assignment.w2_exact(X, Y), w2sq)
    monkeypatch.setattr(assignment, "LOCAL_ROUNDS", 1)
    one_round = assignment.w2_exact(X, Y)
    assert not one_round.certified and one_round.error_bound > 1e-3 * w2sq
    assert abs(one_round.value**2 - w2sq) <= one_round.error_bound


@pytest.mark.parametrize("n,d,k", [(8, 3, 2), (64, 2, 2), (1000, 3, 2), (1000, 5, 4), (2000, 3, 4)])
def test_clusters_that_were_certified_wrong(n, d, k):
    """Inputs on which a certificate blind to its own rounding certified values 22 %–179 % too large."""
    X, Y, w2sq = _clusters(n + d + k, n, d, k, 1e-8)
    _assert_right(assignment.w2_exact(X, Y), w2sq)


#: (seed, n, d, k, spread, whether a local solve runs out of the default scan budget, certified with the short one)
MIXED = [(1186265640, 150, 2, 3, 1e-8, False, False), (699035549, 257, 2, 4, 1e-6, True, True)]


@pytest.mark.parametrize("seed, n, d, k, spread, out_at_default, certified_short", MIXED)
def test_clusters_of_different_spreads_are_certified_right(
    seed, n, d, k, spread, out_at_default, certified_short, monkeypatch
):
    """Clusters of spreads 1e-8 and 1e-14 (or 1e-6 … 1e-12) side by side: the shortest-path potentials of the
    local re-solve need a negative cycle cancelled after many label scans. On the first input a scan budget of
    50·(arcs + N) runs out and the result falls back uncertified, while 500·(arcs + N) (the default) certifies it
    right; on the second, one local solve runs out at either budget and a later local round certifies it right.
    Either way the bound covers the truth."""
    X, Y, w2sq = _mixed_clusters(seed, n, d, k, spread)
    full = assignment.w2_exact(X, Y)
    _assert_right(full, w2sq)
    assert bool(full.stats.get("local_budget_out")) == out_at_default
    monkeypatch.setattr(assignment, "LOCAL_SCAN_BUDGET", 50)
    short = assignment.w2_exact(X, Y)
    assert short.stats.get("local_budget_out") and short.certified == certified_short
    assert abs(short.value**2 - w2sq) <= short.error_bound
    if short.certified:
        _assert_right(short, w2sq)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(8, 300),
    d=st.integers(2, 4),
    k=st.integers(2, 4),
    spread=st.sampled_from([1e-6, 1e-8]),
)
def test_mixed_spreads_are_never_certified_wrong(seed, n, d, k, spread):
    """Right when certified, and the bound covers the truth either way. Not always certified: in 31 of 9652
    random cases (N = 273…600) the local re-solve's scan budget ran out and the result says so
    (``local_budget_out``, certified False)."""
    X, Y, w2sq = _mixed_clusters(seed, n, d, k, spread)
    res = assignment.w2_exact(X, Y)
    assert abs(res.value**2 - w2sq) <= res.error_bound, (res.value**2, w2sq, res.error_bound)
    if res.certified:
        _assert_right(res, w2sq)


def test_the_rounding_terms_are_what_keeps_the_certificate_honest(monkeypatch):
    """Without the local re-solve the simplex stops at a wrong assignment whose reduced costs alone (no rounding
    terms) pass a tolerance floor at the rounding of the potentials, 1e-14·max(|u|, |v|, c): the rule that
    certified it before. The bound with its rounding refuses it, and still holds."""
    X, Y, w2sq = _clusters(5, 64, 3, 2, 1e-8)
    _assert_right(assignment.w2_exact(X, Y), w2sq)
    monkeypatch.setattr(assignment, "_with_local_duals", lambda *args: None)
    wrong = assignment.w2_exact(X, Y, fallback=False)
    assert wrong.value**2 > 1.2 * w2sq and not wrong.certified
    assert wrong.value**2 - w2sq <= wrong.error_bound
    monkeypatch.setattr(pricing, "_rounding_constants", lambda d: (0.0, 0.0, 0.0))
    blind = pricing._certificate(X, Y, wrong.perm, wrong.v, np.inf)
    floor = 1e-14 * max(np.max(np.abs(wrong.u)), np.max(np.abs(wrong.v)), np.max(_cost(X, Y[wrong.perm])))
    assert blind.gap <= floor


def test_a_bound_at_or_above_w2_squared_is_never_certified():
    passes = None
    small = pricing._Bound(gap=1e-16, plain_gap=0.0, value_sq=1e-16, value_err=0.0, pricing=passes)
    assert not pricing._meets(small, target=1.0)  # bound = W2²: says nothing about W2
    assert pricing._meets(pricing._Bound(0.0, 0.0, 0.0, 0.0, passes), target=0.0)  # W2 = 0, bound 0
    assert not pricing._meets(pricing._Bound(1e-300, 0.0, 0.0, 0.0, passes), target=1.0)
    X, Y, _ = _clusters(1, 300, 3, 2, 1e-8)
    res = assignment.w2_exact(X, Y, tol=10.0)  # a target above W2² itself cannot certify a loose bound
    assert not res.certified or res.error_bound < res.value**2


def _permuted_duplicates(seed, n, d, copies):
    rng = np.random.default_rng(seed)
    P = _sphere(rng, -(-n // copies), d)
    X = np.repeat(P, copies, axis=0)[:n]
    return X, X[rng.permutation(n)]


@pytest.mark.parametrize(
    "n,d,copies", [(257, 2, 2), (300, 3, 2), (300, 3, 75), (1000, 2, 2), (2000, 3, 2), (2000, 3, 500)]
)
def test_permuted_duplicates_finish_with_w2_zero_and_bound_zero(n, d, copies):
    """Exact copies, Y a shuffled copy of X: W2 = 0, certified with a bound of exactly 0, in a bounded
    number of pivots (each copy's partner is in the candidates by lexicographic rank)."""
    X, Y = _permuted_duplicates(n, n, d, copies)
    res = assignment.w2_exact(X, Y)
    assert res.value == 0.0 and res.certified and res.error_bound == 0.0
    assert res.stats["pivots"] <= assignment.PIVOT_BUDGET * (res.n_candidates + n)


def test_rank_pairs_pair_copies_at_zero_cost():
    X, Y = _permuted_duplicates(3, 600, 3, 75)
    assert np.all(X == Y[neighbours.rank_pairs(X, Y)[:, 0]])


def _tie_heavy(kind, rng):
    if kind == "noisy copies":
        X, Y = _permuted_duplicates(7, 300, 3, 75)
        return X + 1e-9 * rng.standard_normal(X.shape), Y + 1e-9 * rng.standard_normal(Y.shape)
    if kind in ("lattice", "shifted lattice"):
        g = np.stack(np.meshgrid(np.arange(20), np.arange(20)), -1).reshape(-1, 2) / 19.0
        G = np.column_stack([g, np.zeros(len(g))])
        return G, G[rng.permutation(len(G))] + (0.5 / 19 if kind == "shifted lattice" else 0.0)
    if kind == "antipodal":
        Q = _sphere(rng, 150, 3)
        return np.concatenate([Q, -Q]), np.concatenate([-Q, Q])[rng.permutation(300)]
    if kind == "identical":
        X = _sphere(rng, 500, 3)
        return X, X.copy()
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["noisy copies", "lattice", "shifted lattice", "antipodal", "identical"])
def test_tie_heavy_inputs_equal_linear_sum_assignment(kind):
    X, Y = _tie_heavy(kind, np.random.default_rng(11))
    _assert_right(assignment.w2_exact(X, Y), _lsa_w2sq(X, Y) / len(X))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 300),
    d=st.integers(1, 4),
    kind=st.sampled_from(["random", "copies", "grid"]),
)
def test_equals_linear_sum_assignment(seed, n, d, kind):
    rng = np.random.default_rng(seed)
    if kind == "random":
        X, Y = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    elif kind == "copies":
        X, Y = _permuted_duplicates(seed, n, d, int(rng.integers(1, 20)))
    else:
        X, Y = np.round(rng.standard_normal((n, d)) * 2) / 2, np.round(rng.standard_normal((n, d)) * 2) / 2
    _assert_right(assignment.w2_exact(X, Y, dense_base=16), _lsa_w2sq(X, Y) / n)


def test_coordinates_near_underflow_and_overflow_are_solved_rescaled():
    """W2(sX, sY) = s·W2(X, Y): at s = 1e-120 every cost underflows and at 1e120 overflows unless the
    solver rescales by a power of two (exact); W2² and its bound are then normal float64 numbers."""
    rng = np.random.default_rng(2)
    X, Y = _sphere(rng, 300, 3), _sphere(rng, 300, 3)
    ref = assignment.w2_exact(X, Y)
    for s in (1e-120, 1e120):
        res = assignment.w2_exact(X * s, Y * s)
        assert res.certified and res.value == pytest.approx(ref.value * s, rel=1e-13)
        assert res.stats["scale_exponent"] != 0
    wide = X.copy()
    wide[0, 0], wide[1, 0] = 1e200, 1e-300
    with pytest.raises(ValueError, match="span more than float64"):
        assignment.w2_exact(wide, Y)


def test_the_fallback_is_certified_by_the_same_rule():
    """POT's plan on clusters of spread 1e-8 (where POT's own value is wrong): certified only with a bound
    that holds; on ordinary clouds certified within FALLBACK_REL_TOL."""
    X, Y, w2sq = _clusters(9, 400, 3, 2, 1e-8)
    res = assignment.w2_exact(X, Y, k=0, k_sync=0, guide=False, max_rounds=1)
    assert res.fallback
    assert not res.certified or abs(res.value**2 - w2sq) <= res.error_bound
    rng = np.random.default_rng(4)
    A, B = _sphere(rng, 400, 3), _sphere(rng, 400, 3)
    res = assignment.w2_exact(A, B, k=0, k_sync=0, guide=False, max_rounds=1)
    assert res.fallback and res.certified and res.error_bound <= assignment.FALLBACK_REL_TOL * res.value**2
    assert abs(res.value**2 - _lsa_w2sq(A, B) / 400) <= res.error_bound


@pytest.mark.parametrize(
    "X,Y,error,match",
    [
        (np.zeros((0, 3)), np.zeros((0, 3)), ValueError, "empty"),
        (np.ones((4, 3)) * (1 + 1j), np.ones((4, 3)), TypeError, "complex"),
        (np.array([["a", "b"], ["c", "d"]]), np.ones((2, 2)), TypeError, "real numbers"),
        (np.ones(4), np.ones(4), ValueError, r"shape \(N, d\)"),
        (np.ones((4, 3)), np.ones((4, 2)), ValueError, "same dimension"),
        (np.full((4, 3), np.inf), np.ones((4, 3)), ValueError, "non-finite"),
    ],
)
def test_bad_w2_input_is_named_before_any_work(X, Y, error, match):
    with pytest.raises(error, match=match):
        transport.w2(X, Y)


def test_bad_weights_are_named():
    X = np.ones((3, 2))
    with pytest.raises(ValueError, match="weights a"):
        transport.w2(X, X, a=np.array([0.5, np.nan, 0.5]))
    with pytest.raises(TypeError, match="weights b"):
        transport.w2(X, X, b=np.ones(3) * 1j)


def test_an_uncertified_result_names_its_bound(monkeypatch):
    X, Y, _ = _clusters(3, 64, 3, 2, 1e-8)
    monkeypatch.setattr(assignment, "REL_TOL", 0.0)  # a target no bound > 0 can reach
    real = assignment.w2_exact
    monkeypatch.setattr(assignment, "w2_exact", lambda A, B: real(A, B, rel_tol=0.0, fallback=False))
    with pytest.raises(transport.TransportNotConverged, match="error bound on W2²"):
        transport.w2(X, Y)


def test_a_shifted_chain_among_matched_tokens():
    """In the unit cube: 896 tokens matched to within 1e-15 and a chain of 128 tokens spaced 1e-11 shifted
    by 8 steps (W2 = 2.83e-11, far below the costs): an assignment 3.85× too large passed the old rule."""
    rng = np.random.default_rng(3)
    P = rng.random((896, 3))
    chain = rng.random(3) + np.arange(128)[:, None] * np.array([1e-11, 0.0, 0.0])
    X = np.concatenate([P, chain])
    Y = np.concatenate([P + 1e-15 * rng.standard_normal(P.shape), chain + np.array([8e-11, 0.0, 0.0])])
    Y = Y[rng.permutation(len(Y))]
    w2sq = _lsa_w2sq(X, Y) / len(X)
    assert w2sq == pytest.approx(128 * (8e-11) ** 2 / 1024, rel=1e-3)
    _assert_right(assignment.w2_exact(X, Y), w2sq)


def test_the_pivot_budget_ends_a_solve_and_hands_it_to_the_fallback(monkeypatch):
    """The last guard: a simplex out of pivots stops, and POT's plan, certified by the same bound, answers."""
    rng = np.random.default_rng(12)
    X, Y = _sphere(rng, 600, 3), _sphere(rng, 600, 3)
    monkeypatch.setattr(assignment, "PIVOT_BUDGET", 0)
    res = assignment.w2_exact(X, Y)
    assert res.stats["pivot_budget_out"] and res.fallback and res.certified
    assert abs(res.value**2 - _lsa_w2sq(X, Y) / 600) <= res.error_bound


def test_bounds_too_small_or_large_for_float64_are_not_certified():
    """At 1e-160 W2² is below float64's normal range and at 1e200 above it: the value is still given, but a
    bound on W2² cannot be held, so nothing is certified; a subnormal difference of one coordinate (W2² ≈
    1e-650) is not certified as W2 = 0 either."""
    rng = np.random.default_rng(8)
    X, Y = _sphere(rng, 300, 3), _sphere(rng, 300, 3)
    ref = assignment.w2_exact(X, Y).value
    for s in (1e-160, 1e200):
        res = assignment.w2_exact(X * s, Y * s)
        assert not res.certified and res.value == pytest.approx(ref * s, rel=1e-13)
    W = X.copy()
    W[0, 0] = 5e-324
    V = W[rng.permutation(300)].copy()
    V[V[:, 0] == 5e-324, 0] = 0.0  # one coordinate differs by the smallest subnormal: W2² ≈ 8e-650
    res = assignment.w2_exact(W, V)
    assert res.value == 0.0 and not res.certified and res.error_bound > 0.0
    all_subnormal = np.ldexp(_sphere(rng, 20, 3), -1040)
    res = assignment.w2_exact(all_subnormal, all_subnormal[::-1].copy())
    assert res.value == 0.0 and res.certified


@pytest.mark.parametrize(
    "option,value",
    [
        ("tol", "x"),
        ("tol", -1.0),
        ("rel_tol", -1.0),
        ("rel_tol", np.nan),
        ("dense_base", 0),
        ("cell_neighbours", 0),
        ("k", -1),
        ("warm", "x"),
    ],
)
def test_bad_options_are_named(option, value):
    X = _sphere(np.random.default_rng(0), 10, 3)
    with pytest.raises((ValueError, TypeError), match=option):
        assignment.w2_exact(X, X, **{option: value})


def test_masked_unequal_mass_and_inexact_inputs_are_refused():
    X = np.ones((4, 2))
    with pytest.raises(TypeError, match="masked"):
        transport.w2(np.ma.masked_array(X, mask=False), X)
    with pytest.raises(ValueError, match="same total mass"):
        transport.w2(X, X, a=np.ones(4))
    with pytest.raises(ValueError, match="does not hold exactly"):
        transport.w2(np.full((4, 2), 2**62 + 1, dtype=np.int64), X)
