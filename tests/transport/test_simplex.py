"""The sparse network simplex (lowtemp.transport.simplex) against SciPy's sparse assignment (LAPJVsp), and its
optimality conditions read off its own duals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import min_weight_full_bipartite_matching

from lowtemp.transport.simplex import SparseAssignment


def _graph(seed, n, degree, integer_costs):
    """A random bipartite arc set holding a perfect matching (the identity and a random permutation)."""
    rng = np.random.default_rng(seed)
    rows = [np.arange(n), np.arange(n), np.repeat(np.arange(n), degree)]
    cols = [np.arange(n), rng.permutation(n), rng.integers(0, n, n * degree)]
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    key = np.unique(rows * n + cols)
    rows, cols = key // n, key % n
    costs = rng.integers(0, 4, rows.size).astype(float) if integer_costs else rng.random(rows.size)
    return rows, cols, costs


def _reference(n, rows, cols, costs):
    """Optimal cost by SciPy (costs shifted by 1: its sparse format drops explicit zeros)."""
    M = csr_matrix((costs + 1.0, (rows, cols)), shape=(n, n))
    r, c = min_weight_full_bipartite_matching(M)
    return float(np.sum(np.asarray(M[r, c]).ravel() - 1.0))


def _cost_of(perm, rows, cols, costs, n):
    lookup = dict(zip((rows * n + cols).tolist(), costs.tolist()))
    return sum(lookup[i * n + int(j)] for i, j in enumerate(perm))


def _rounding_tol(n, costs, root):
    """A pivoting threshold above the rounding of any potential, as the pipeline's solves use: a potential is a
    root cost plus at most 2n arc costs, and below 64·u·(that bound) a reduced cost can be rounding alone. At a
    threshold of 0 a solve may pivot for ever on reduced costs of −2e-15 (integer costs, root costs of size 10:
    seed 756722449, n = 10, degree 6, over 10⁷ degenerate pivots)."""
    bound = (0.0 if root is None else float(np.max(np.abs(root)))) + 2 * n * float(np.max(costs, initial=0.0))
    return 64 * 2.0**-53 * bound


def _assert_optimal_by_duals(S, rows, cols, costs, tol=1e-12):
    """Dual feasibility on every arc and tightness on the assignment: the assignment is optimal."""
    perm = S.assignment()
    u, v = S.duals()
    reduced = costs - u[rows] - v[cols]
    assert reduced.min() >= -tol
    n = perm.size
    assigned = dict(zip((rows * n + cols).tolist(), reduced.tolist()))
    assert max(abs(assigned[i * n + int(j)]) for i, j in enumerate(perm)) <= tol


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    degree=st.integers(0, 6),
    integer_costs=st.booleans(),
    random_root=st.booleans(),
    block=st.sampled_from([None, 1, 2, 5]),
)
def test_optimal_like_scipy_from_any_start(seed, n, degree, integer_costs, random_root, block):
    """Any starting assignment among the arcs and any root costs (the starting potentials) end at the
    optimum; integer costs make many ties (degenerate pivots, several optima). Blocks of 1–5 arcs make
    most searches scan past ``SWEEP_BLOCKS`` blocks, so the listed arcs choose most entering arcs."""
    rows, cols, costs = _graph(seed, n, degree, integer_costs)
    rng = np.random.default_rng(seed + 1)
    start = np.arange(n)
    root = rng.normal(0, 10, n) if random_root else None
    S = SparseAssignment.start(rows, cols, costs, start, root)
    assert S.solve(_rounding_tol(n, costs, root), block=block, max_pivots=10**6)
    perm = S.assignment()
    assert np.array_equal(np.sort(perm), np.arange(n))
    assert _cost_of(perm, rows, cols, costs, n) == pytest.approx(_reference(n, rows, cols, costs), abs=1e-9)
    _assert_optimal_by_duals(S, rows, cols, costs, tol=max(1e-12, 2 * _rounding_tol(n, costs, root)))


def test_the_duals_catch_a_suboptimal_assignment():
    """The optimality check above can fail: the starting basis of a suboptimal assignment, not pivoted,
    has an arc of negative reduced cost."""
    rows, cols, costs = _graph(3, 30, 4, False)
    S = SparseAssignment.start(rows, cols, costs, np.arange(30))
    assert _cost_of(S.assignment(), rows, cols, costs, 30) > _reference(30, rows, cols, costs) + 1e-6
    with pytest.raises(AssertionError):
        _assert_optimal_by_duals(S, rows, cols, costs)
    assert not S.solve(0.0, max_pivots=1)  # one pivot is not enough here
    S.solve(0.0)
    _assert_optimal_by_duals(S, rows, cols, costs)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 40))
def test_added_arcs_resume_from_the_basis(seed, n):
    """Column generation: optimum on part of the arcs, then the rest added, equals the optimum on all."""
    rows, cols, costs = _graph(seed, n, 5, False)
    keep = (cols == np.arange(rows.size) % n) | (np.random.default_rng(seed).random(rows.size) < 0.3)
    keep |= rows == cols  # the identity start
    S = SparseAssignment.start(rows[keep], cols[keep], costs[keep], np.arange(n))
    S.solve(0.0)
    first = _cost_of(S.assignment(), rows, cols, costs, n)
    S.add_arcs(rows[~keep], cols[~keep], costs[~keep])
    S.solve(0.0)
    best = _reference(n, rows, cols, costs)
    assert best <= first + 1e-9
    assert _cost_of(S.assignment(), rows, cols, costs, n) == pytest.approx(best, abs=1e-9)
    _assert_optimal_by_duals(S, rows, cols, costs)


def test_all_costs_equal_terminates():
    """Fully degenerate (every arc the same cost, every perfect matching optimal): the strongly feasible
    tree forbids cycling, so the pivots stop, and no pivot is needed from any start."""
    n = 60
    rows, cols = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    S = SparseAssignment.start(rows, cols, np.ones(n * n), np.random.default_rng(0).permutation(n))
    assert S.solve(0.0) and S.pivots == 0
    _assert_optimal_by_duals(S, rows, cols, np.ones(n * n))


def test_start_must_use_the_arcs():
    rows, cols, costs = np.array([0, 1]), np.array([1, 0]), np.array([1.0, 1.0])
    with pytest.raises(ValueError, match="not all among the arcs"):
        SparseAssignment.start(rows, cols, costs, np.array([0, 1]))


def test_a_block_below_one_arc_is_refused():
    rows, cols, costs = _graph(1, 10, 2, False)
    S = SparseAssignment.start(rows, cols, costs, np.arange(10))
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="block must be an integer"):
            S.solve(0.0, block=bad)
    # a block far beyond the arcs is one block of all arcs (its list sized by the arcs, not by the block)
    assert S.solve(_rounding_tol(10, costs, None), block=2**62)
    _assert_optimal_by_duals(S, rows, cols, costs)


def test_a_threshold_below_the_rounding_of_the_potentials_can_pivot_for_ever():
    """Why the threshold above: at 0 this input pivots on reduced costs that are rounding alone (−1.8e-15, every
    pivot degenerate) and meets any pivot budget; at the rounding threshold it ends at the optimum."""
    seed, n = 756722449, 10
    rows, cols, costs = _graph(seed, n, 6, True)
    root = np.random.default_rng(seed + 1).normal(0, 10, n)
    S = SparseAssignment.start(rows, cols, costs, np.arange(n), root)
    assert not S.solve(0.0, max_pivots=10**5)
    T = SparseAssignment.start(rows, cols, costs, np.arange(n), root)
    assert T.solve(_rounding_tol(n, costs, root), max_pivots=10**5)
    assert _cost_of(T.assignment(), rows, cols, costs, n) == pytest.approx(_reference(n, rows, cols, costs), abs=1e-9)
