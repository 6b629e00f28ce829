"""The certified W2 (lowtemp.transport.assignment: multiscale guide, sparse network simplex, all-pairs pricing) against
POT's network simplex on the dense matrix."""

from __future__ import annotations

import numpy as np
import ot
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lowtemp.transport import assignment, guide, neighbours, pricing


def _sphere(rng, n, d):
    Z = rng.standard_normal((n, d))
    return Z / np.linalg.norm(Z, axis=1, keepdims=True)


def _emd2_value(X, Y):
    """W2 from ot.emd2 on the dense cost |x − y|² (differences, as the solver)."""
    C = np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=-1)
    a = np.full(len(X), 1.0 / len(X))
    return float(np.sqrt(max(ot.emd2(a, a, C, numItermax=10**7), 0.0)))


def _clouds(seed, n, d, kind):
    """Pairs of clouds from the same tokens: random, clustered near ±u, or tie-heavy (duplicates, grid)."""
    rng = np.random.default_rng(seed)
    X = _sphere(rng, n, d)
    if kind == "random":
        Y = _sphere(rng, n, d)
    elif kind == "perturbed":
        Y = X + 0.05 * rng.standard_normal((n, d))
        Y /= np.linalg.norm(Y, axis=1, keepdims=True)
        swap = rng.choice(n, max(2, n // 10), replace=False)
        Y[swap] = Y[np.roll(swap, 1)]
    elif kind == "clustered":  # most tokens very near ±u, spreads of very different scales
        u = np.eye(d)[0]
        sign = np.where(rng.random(n) < 0.6, 1.0, -1.0)[:, None]
        X = sign * u + 10.0 ** -rng.integers(2, 5) * rng.standard_normal((n, d))
        Y = sign * u + 10.0 ** -rng.integers(4, 9) * rng.standard_normal((n, d))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    elif kind == "ties":  # duplicated tokens and coordinates on a coarse grid: many equal costs
        X = np.round(X * 2) / 2
        Y = np.round(_sphere(rng, n, d) * 2) / 2
        X[: n // 3] = X[0]
        Y[: n // 4] = Y[1]
    else:
        raise ValueError(kind)
    return np.ascontiguousarray(X), np.ascontiguousarray(Y)


def _assert_same_w2(value, ref):
    assert abs(value**2 - ref**2) <= 1e-9 * ref**2 + 1e-14, (value, ref)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 60),
    d=st.sampled_from([2, 3]),
    kind=st.sampled_from(["random", "perturbed", "clustered", "ties"]),
    k=st.sampled_from([1, 4, 16]),
    dense_base=st.sampled_from([4, 16, 256]),
    guide=st.sampled_from([None, True, False]),
)
def test_equals_emd2(seed, n, d, kind, k, dense_base, guide):
    """Every path: all pairs (N ≤ dense_base), or the sparse solve with and without the coarse guide,
    recursively down to dense_base (4 makes even N = 60 three levels deep)."""
    X, Y = _clouds(seed, n, d, kind)
    res = assignment.w2_exact(X, Y, k=k, k_sync=k // 2, dense_base=dense_base, guide=guide)
    _assert_same_w2(res.value, _emd2_value(X, Y))
    assert res.certified
    assert np.array_equal(np.sort(res.perm), np.arange(n))
    cert = pricing.certify(X, Y, res.perm, res.u, res.v, 1e-9)
    assert cert.ok


@pytest.mark.parametrize("kind", ["random", "perturbed", "clustered", "ties"])
def test_medium_clouds(kind):
    X, Y = _clouds(7, 600, 3, kind)
    res = assignment.w2_exact(X, Y)
    _assert_same_w2(res.value, _emd2_value(X, Y))
    assert res.certified and res.gap_bound <= 1e-10


def test_certificate_rejects_swapped_pairs():
    X, Y = _clouds(3, 300, 3, "perturbed")
    res = assignment.w2_exact(X, Y)
    assert pricing.certify(X, Y, res.perm, res.u, res.v).ok
    bad = res.perm.copy()
    cost = np.sum((X - Y[bad]) ** 2, axis=1)
    i, j = 0, int(np.argmax(np.sum((X - X[0]) ** 2, axis=1)))  # swap partners of two far-apart tokens
    bad[[i, j]] = bad[[j, i]]
    assert np.sum((X - Y[bad]) ** 2) > np.sum(cost)
    cert = pricing.certify(X, Y, bad, res.u, res.v)
    assert not cert.ok and cert.max_slack > 1e-3


def test_certificate_reports_violating_pairs_of_perturbed_duals():
    X, Y = _clouds(4, 300, 3, "perturbed")
    res = assignment.w2_exact(X, Y)
    u = res.u.copy()
    u[17] += 0.05  # row 17 now claims more than its cheapest column allows
    cert = pricing.certify(X, Y, res.perm, u, res.v, per_row=3)
    assert not cert.ok and cert.n_violations >= 1 and cert.min_reduced < -1e-3
    assert set(cert.pairs[:, 0]) == {17} and len(cert.pairs) == min(3, cert.n_violations)
    # the reported pairs are the most violated ones, most negative first; ties in the order the row scans its
    # columns, from column 17 on
    red = np.sum((X[17] - Y) ** 2, axis=1) - u[17] - res.v
    order = np.lexsort(((np.arange(300) - 17) % 300, red))
    assert np.array_equal(cert.pairs[:, 1], order[: len(cert.pairs)])
    # bounded list
    assert len(pricing.certify(X, Y, res.perm, u + 0.05, res.v, max_pairs=10).pairs) == 10


def test_candidate_growth_reaches_the_optimum():
    """Only the synchronous pairs as candidates: the pricing passes add the pairs that beat the assignment
    until the duality gap closes; the restricted optimum of the first pass was not the optimum."""
    X, Y = _clouds(5, 400, 3, "perturbed")
    first = assignment.w2_exact(X, Y, k=0, k_sync=0, guide=False, max_rounds=1, fallback=False)
    assert not first.certified and first.gap_bound > 1e-3 and first.value > _emd2_value(X, Y) * (1 + 1e-6)
    res = assignment.w2_exact(X, Y, k=0, k_sync=0, guide=False, max_rounds=100)
    assert res.rounds > 1 and not res.fallback and res.certified
    _assert_same_w2(res.value, _emd2_value(X, Y))


def test_gap_bound_bounds_the_error_of_an_uncertified_assignment():
    """Weak duality: W2²(perm) − W2²_opt ≤ gap_bound for whatever assignment the solve stopped at."""
    X, Y = _clouds(11, 400, 3, "perturbed")
    ref = _emd2_value(X, Y) ** 2
    for rounds in (1, 2, 3):
        res = assignment.w2_exact(X, Y, k=0, k_sync=0, guide=False, max_rounds=rounds, fallback=False)
        assert 0.0 <= res.value**2 - ref <= res.gap_bound + 1e-15
        assert res.certified == (res.gap_bound <= 1e-11 * res.value**2 + 1e-14)


def test_fallback_to_network_simplex():
    X, Y = _clouds(6, 400, 3, "perturbed")
    res = assignment.w2_exact(X, Y, k=0, k_sync=0, guide=False, max_rounds=1)
    assert res.fallback and res.rounds == 1 and res.certified
    _assert_same_w2(res.value, _emd2_value(X, Y))


def test_warm_start_and_determinism():
    X, Y = _clouds(8, 800, 3, "perturbed")
    a = assignment.w2_exact(X, Y)
    b = assignment.w2_exact(X, Y)
    assert a.value == b.value and np.array_equal(a.perm, b.perm) and np.array_equal(a.v, b.v)
    Y2 = Y + 1e-3 * np.random.default_rng(0).standard_normal(Y.shape)
    c = assignment.w2_exact(X, Y2, warm=a)
    _assert_same_w2(c.value, _emd2_value(X, Y2))
    assert c.certified


def test_bad_input():
    X, Y = _clouds(9, 10, 3, "random")
    with pytest.raises(ValueError):
        assignment.w2_exact(X, Y[:5])
    with pytest.raises(ValueError):
        assignment.w2_exact(X, np.full_like(Y, np.nan))


def test_separation_on_a_shifted_grid():
    """Y a line of tokens spaced h, X the same line shifted by D ⟂ it: the separation is D / h exactly."""
    h, D = 0.01, 0.37
    Y = np.column_stack([h * np.arange(50), np.zeros(50), np.zeros(50)])
    X = Y + np.array([0.0, D, 0.0])
    assert neighbours.candidate_neighbours(X, Y, 2, 2)[1] == pytest.approx(D / h, rel=1e-12)
    assert neighbours.candidate_neighbours(Y, Y, 2, 2)[1] == 0.0


def _departed(rng, n):
    """Clusters on different axes, a few tokens on the other side (the clouds after the departure)."""
    sign = np.where(rng.random(n) < 0.55, 1.0, -1.0)[:, None]
    X = sign * np.array([1.0, 0.0, 0.0]) + 1e-3 * rng.standard_normal((n, 3))
    flip = rng.choice(n, n // 50, replace=False)
    sign[flip] *= -1
    Y = sign * np.array([0.6, 0.8, 0.0]) + 1e-5 * rng.standard_normal((n, 3))
    return X, Y


@pytest.mark.parametrize("n", [600, 1024, 1000])
def test_far_clouds_are_solved_from_matched_cells(n):
    """Far apart (separation above LOCAL_SEPARATION): the coarse guide's cells start the simplex, which
    certifies without POT and equals emd2 (N = 1000: cells of unequal size); without the guide the
    nearest-neighbour candidates need more pricing passes; clouds close together skip the guide."""
    rng = np.random.default_rng(n)
    X, Y = _departed(rng, n)
    far = assignment.w2_exact(X, Y)
    assert far.stats["separation"] > assignment.LOCAL_SEPARATION
    assert far.stats["coarse"] is not None and far.stats["start"] in ("cells", "synchronous")
    assert not far.fallback and far.certified
    _assert_same_w2(far.value, _emd2_value(X, Y))
    bare = assignment.w2_exact(X, Y, guide=False)
    assert bare.stats["coarse"] is None and bare.rounds > far.rounds
    _assert_same_w2(bare.value, far.value)
    near = X + 3e-5 * rng.standard_normal((n, 3))
    res = assignment.w2_exact(X, near)
    assert res.stats["separation"] < assignment.LOCAL_SEPARATION and res.stats["coarse"] is None
    assert res.certified
    _assert_same_w2(res.value, _emd2_value(X, near))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 200), size=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_balanced_cells_partition_the_cloud(n, size, seed):
    P = np.random.default_rng(seed).standard_normal((n, 3))
    cells = guide.balanced_cells(P, size)
    tokens = cells[cells >= 0]
    assert np.array_equal(np.sort(tokens), np.arange(n))  # every token in exactly one cell
    counts = np.sum(cells >= 0, axis=1)
    assert counts.max() <= size and (n <= size or counts.min() >= size // 2)
    if n == size * 2 ** int(np.log2(max(n // size, 1))) and n % size == 0:
        assert np.all(counts == size)


def test_matched_cells_feed_a_solve_that_can_fail():
    """The cells' candidates alone (no nearest neighbours, one pricing pass) cannot certify a departed
    pair: the solve falls back to the network simplex, which still gives emd2's value."""
    X, Y = _departed(np.random.default_rng(3), 512)
    alone = assignment.w2_exact(X, Y, k=0, k_sync=0, k_dual=0, max_rounds=1, fallback=False)
    assert alone.stats["start"] == "cells" and not alone.certified and alone.gap_bound > 1e-9
    res = assignment.w2_exact(X, Y, k=0, k_sync=0, k_dual=0, max_rounds=1)
    assert res.fallback and res.certified
    _assert_same_w2(res.value, _emd2_value(X, Y))


def test_an_unguided_solve_that_stalls_starts_again_with_the_guide(monkeypatch):
    """Clouds taken for local (the separation threshold raised past them) whose nearest-neighbour
    candidates do not certify within UNGUIDED_ROUNDS passes are solved again with the coarse guide,
    not handed to POT."""
    X, Y = _departed(np.random.default_rng(5), 1024)
    monkeypatch.setattr(assignment, "LOCAL_SEPARATION", np.inf)
    res = assignment.w2_exact(X, Y)
    assert res.stats["unguided_rounds"] == assignment.UNGUIDED_ROUNDS and res.stats["coarse"] is not None
    assert res.certified and not res.fallback
    _assert_same_w2(res.value, _emd2_value(X, Y))
