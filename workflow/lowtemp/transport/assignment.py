"""Exact W2 between two equal-size uniform clouds, certified on all N² pairs: the driver.

With uniform weights 1/N on both sides, optimal transport for the cost c_ij = |x_i − y_j|² is
an assignment problem (Birkhoff): W2² = min_π (1/N) Σ_i c_{i,π(i)}. It is solved on a sparse
set of candidate pairs by a primal network simplex (``lowtemp.transport.simplex``), priced on all N²
pairs without storing them, and grown where the pricing finds better pairs:

1. Multiscale guide (``guide``). Both clouds are cut into balanced cells of ``guide.CELL_SIZE`` tokens
   (``guide.balanced_cells``: median splits of the widest coordinate), and the cells' centroids are
   matched by the same solver, recursively, down to ``DENSE_BASE`` points (where every pair is
   a candidate). The match gives (a) a starting assignment: the tokens of matched cells paired
   optimally inside each pair of cells, or the synchronous pairing x_i ↔ y_i if that costs less;
   (b) starting column potentials: the coarse ones extended to first order,
   v_j = V_B − 2⟨y_j − m_B, m_A − m_B⟩ for y_j in cell B matched from cell A (the separable part of
   |x − y|² around the two centroids); (c) candidates: the tokens of the ``guide.CELL_NEIGHBOURS`` Y cells
   nearest to a row's matched cell. Clouds far apart (after the departure) are exactly where
   nearest neighbours say nothing about the plan and the matched cells do.
2. Candidates (``neighbours``; CSR, O(N·k) memory): besides the matched cells, the k nearest y's of x_i,
   the k_sync nearest y's of y_i, the ``k_dual`` columns minimising c_ij − v_j under the starting
   potentials (``neighbours.lifted_neighbours``), the starting assignment, (i, i) and the lexicographic
   rank pairs (``neighbours.rank_pairs``: every exact copy of a token gets its own partner).
3. Network simplex on the candidates from the starting basis (``simplex.SparseAssignment``):
   exact on the candidate graph, insensitive to the degeneracy of clustered clouds.
4. Pricing and certificate (``pricing``). A streamed numba pass over all N² pairs (parallel over rows) gives
   the c-transform u*_i = min_j (c_ij − v_j) of the simplex's column potentials, which makes (u*, v) dual
   feasible for the whole problem by construction. Weak duality then bounds the error of
   the assignment π: W2²(π) − W2²_opt ≤ (1/N) Σ_i (c_{iπ(i)} − v_{π(i)} − u*_i) = ``gap_bound``,
   every term bounded with the rounding of its own arithmetic (``pricing._rounding_of``), so the bound holds
   for the exact costs of the given coordinates; ``error_bound`` adds the rounding of W2²(π).
   Certified: error_bound ≤ ``rel_tol``·W2² (or ``tol``) and below W2² (or both 0). Where the tree's
   O(1) potentials leave the bound to rounding (W2² far below the costs between clusters), the
   assignment is re-solved on its cheap arcs with potentials of their own size (``_with_local_duals``,
   with the shortest-path potentials of ``duals``).
   The pass also returns, per row, the columns that beat the row's assignment; if the bound
   misses the target they join the candidate set and the simplex resumes from its basis (column
   generation), up to ``max_rounds`` passes; then POT's network simplex (``ot.emd`` dense up to
   ``DENSE_MAX`` tokens, ``ot.emd2_lazy`` above) gives the answer, certified by the same bound at
   ``FALLBACK_REL_TOL``.

Everything is sequential except the nearest-neighbour queries and the pricing pass (parallel
over rows, each row writing its own output slots), so the same input gives the same bits.
Its numba functions (and those of ``pricing``, ``duals``, ``neighbours``, ``guide`` and ``simplex``) are cached
on disk (numba's cache, next to the module or in ``NUMBA_CACHE_DIR``): a distances job would otherwise spend
about 9 s compiling them; a cached load gives the same bits as a fresh compile
(``tests/workflow/test_numba_cache.py``; none of them uses fastmath).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numba
import numpy as np
import ot

from .duals import _local_duals
from .guide import CELL_NEIGHBOURS, _multiscale_guide
from .limits import DENSE_BASE, DENSE_MAX
from .neighbours import _build_csr, candidate_neighbours, lifted_neighbours, rank_pairs
from .pricing import _U, _Bound, _certificate, _meets, _pair_costs, _sqdist, as_cloud
from .simplex import SparseAssignment

#: w2_exact's default target: the certified error bound on W2² at most REL_TOL·W2² (relative to the problem's
#: own value; W2 = 0 is certified only with a bound of exactly 0)
REL_TOL = 1e-11
#: the simplex stops pivoting when no candidate arc has reduced cost below PIVOT_FRACTION·REL_TOL·W2², or below
#: PIVOT_ROUNDING·u·max|potential| (u = 2⁻⁵³; below it a reduced cost is the rounding of the tree's potentials,
#: and pivoting on it can go on for ever: duplicate tokens at W2 = 0)
PIVOT_FRACTION = 0.25
PIVOT_ROUNDING = 64.0
#: pivots of one simplex solve at most PIVOT_BUDGET·(arcs + N): the last guard against a solve without end
#: (the default run's concentration experiment, every third snapshot of replica 0: median 0.29, at most 0.42)
PIVOT_BUDGET = 50
#: label scans of the shortest-path potentials at most LOCAL_SCAN_BUDGET·(arcs + N)
LOCAL_SCAN_BUDGET = 500
#: the local re-solve (``_with_local_duals``) keeps the arcs costing at most this many times the assignment's
#: dearest pair
LOCAL_COST_FACTOR = 16.0
#: certificates of the local re-solve whose violating pairs join its arcs before it gives up
LOCAL_ROUNDS = 4
#: POT's plan (the fallback) is certified at FALLBACK_REL_TOL·W2²: its duals carry errors that grow with N
#: (its simplex accumulates potentials along tree paths: measured 4e-13 absolute, dense, N = 4096, and
#: 1.45e-11, lazy, 16 384, on clouds with W2² ≈ 0.1)
FALLBACK_REL_TOL = 1e-8
#: the coarse levels guide the fine one: fewer pricing passes and no fallback (their duals are the
#: fine level's starting potentials, so they are solved to the same relative tolerance: at 1e-8
#: instead, the late snapshots of the default run needed 3.6x more pivots)
COARSE_ROUNDS = 3
#: below this separation (median distance from x_i to Y over the median nearest-neighbour spacing of Y)
#: the clouds are local (each token's partner among its nearest neighbours): the synchronous start and
#: nearest-neighbour candidates need no coarse guide (on the default run at beta = 100, t <= 1:
#: separation <= 0.3, 3-4x faster without it; at separation 0.5-1 either is as fast at N = 4096, but
#: without the guide N = 16384 at t = 4 (separation 0.99) had not converged after 10 passes)
LOCAL_SEPARATION = 0.5
#: an unguided solve that is not certified after this many pricing passes starts again with the guide
UNGUIDED_ROUNDS = 3
#: pricing passes of the finest level before the fallback
MAX_ROUNDS = 10
#: columns a pricing pass adds per row that beats its assignment (16: one pass fewer on some of the default
#: run's snapshots than 8, 5–10 % less time)
PER_ROW = 16
#: clouds whose largest |coordinate| lies outside [2^-SCALE_EXPONENT, 2^SCALE_EXPONENT] are solved rescaled
SCALE_EXPONENT = 64
#: w2_exact's integer options and their smallest values
_INTEGER_OPTIONS = dict(k=0, k_sync=0, k_dual=0, cell_neighbours=1, max_rounds=1, per_row=1, dense_max=0, dense_base=1)


@dataclass
class W2Result:
    """Exact W2 (the distance, not its square) with its certificate.

    perm: the assignment, token i of X ↔ token perm[i] of Y.
    u, v: dual potentials with c_ij − u_i − v_j ≥ 0 for all pairs (u is the c-transform of v).
    rounds: pricing passes over all N² pairs; fallback: POT's network simplex gave the plan.
    gap_bound: ≥ W2²(perm) − W2²_opt, (1/N) Σ_i (c_{iπ(i)} − u_i − v_{π(i)}) with the rounding of every
    term accounted for (it holds for the exact costs of the given coordinates);
    error_bound: ≥ |value² − W2²_opt|, gap_bound plus the rounding of value² itself;
    target: what error_bound had to reach; certified: error_bound ≤ target and error_bound < value²
    (or both 0).
    """

    value: float
    perm: np.ndarray
    u: np.ndarray
    v: np.ndarray
    rounds: int
    fallback: bool
    certified: bool
    gap_bound: float
    n_candidates: int
    stats: dict = field(default_factory=dict)
    error_bound: float = np.inf
    target: float = 0.0


def w2_exact(
    X,
    Y,
    *,
    k: int = 8,
    k_sync: int = 4,
    k_dual: int = 0,
    cell_neighbours: int = CELL_NEIGHBOURS,
    warm=None,
    tol: float | None = None,
    rel_tol: float = REL_TOL,
    max_rounds: int = MAX_ROUNDS,
    per_row: int = PER_ROW,
    dense_max: int = DENSE_MAX,
    dense_base: int = DENSE_BASE,
    fallback: bool = True,
    guide: bool | None = None,
    workers: int = -1,
) -> W2Result:
    """Exact W2 (Euclidean cost in R^d, uniform weights 1/N) between the clouds X and Y, both (N, d).

    The network simplex on the candidate set of the module's steps 1–2, priced on all N² pairs
    (step 4); pairs that beat the assignment are added until the certified error bound on W2² (the
    rounding of every reduced cost and of the value accounted for) is at most ``tol`` (default
    ``rel_tol``·W2²), up to ``max_rounds`` passes, then POT's network simplex decides (``fallback``;
    without it the result is returned uncertified). A bound at or above W2² is never certified.
    Clouds of at most ``dense_base`` tokens use every pair. ``warm`` (a previous :class:`W2Result` of
    clouds of the same size) adds its assignment as a possible start and its column potentials as the
    starting ones. Returns a :class:`W2Result`; ``value`` is W2 itself, sqrt((1/N) Σ_i |x_i − y_perm(i)|²).
    """
    X = as_cloud(X, "X")
    Y = as_cloud(Y, "Y")
    if X.shape != Y.shape:
        raise ValueError(f"w2_exact needs clouds of the same shape, got {X.shape} and {Y.shape}")
    opts = dict(
        k=k,
        k_sync=k_sync,
        k_dual=k_dual,
        cell_neighbours=cell_neighbours,
        warm=warm,
        tol=tol,
        rel_tol=rel_tol,
        max_rounds=max_rounds,
        per_row=per_row,
        dense_max=dense_max,
        dense_base=dense_base,
        fallback=fallback,
        guide=guide,
        workers=workers,
    )
    _check_options(opts)
    e = _binary_exponent(X, Y)
    if e == 0:
        return _solve(X, Y, opts)
    return _solve_rescaled(X, Y, opts, e)


def _solve_rescaled(X, Y, opts, e) -> W2Result:
    """The solve of 2^e·X and 2^e·Y (``_binary_exponent``), its results scaled back by 2^-e (W2) and 2^-2e (W2²,
    its bounds and potentials), bounds rounded up; certified only where float64 holds them."""
    Xs, Ys = np.ldexp(X, e), np.ldexp(Y, e)
    if not (np.array_equal(np.ldexp(Xs, -e), X) and np.array_equal(np.ldexp(Ys, -e), Y)):
        raise ValueError(
            f"the coordinates span more than float64 can hold at one scale (largest "
            f"{max(np.max(np.abs(X)), np.max(np.abs(Y))):.3g}, some underflow once rescaled)"
        )
    if opts["warm"] is not None:
        raise ValueError(
            "a warm start needs clouds within the unscaled range (largest |coordinate| in "
            f"[2^-{SCALE_EXPONENT}, 2^{SCALE_EXPONENT}])"
        )
    if opts["tol"] is not None:
        opts["tol"] = float(np.ldexp(float(opts["tol"]), 2 * e))
    res = _solve(Xs, Ys, opts)
    with np.errstate(over="ignore", under="ignore"):  # squares beyond float64 (coordinates near 1e154 or 1e-154)
        res.value = float(np.ldexp(res.value, -e))
        res.gap_bound, res.error_bound = _up(res.gap_bound, -2 * e), _up(res.error_bound, -2 * e)
        res.target = float(np.ldexp(res.target, -2 * e))
        res.u, res.v = np.ldexp(res.u, -2 * e), np.ldexp(res.v, -2 * e)
    # a bound on W2² is only a bound where float64 holds W2², its target and the bound: normal, finite numbers
    # (or 0 for 0)
    finite = np.isfinite(res.value * res.value) and np.isfinite(res.target) and np.isfinite(res.error_bound)
    exact_zero = res.error_bound == 0.0 and res.value == 0.0
    representable = finite and (res.error_bound >= np.finfo(float).tiny or exact_zero)
    if res.certified and not representable:
        res.certified = False
        res.stats["unrepresentable"] = True
    res.stats["scale_exponent"] = e
    return res


def _check_options(opts) -> None:
    """ValueError/TypeError naming the option, before any work."""
    for key, smallest in _INTEGER_OPTIONS.items():
        value = opts[key]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < smallest:
            raise ValueError(f"w2_exact: {key} must be an integer ≥ {smallest}, got {value!r}")
    for key, allow_none in (("tol", True), ("rel_tol", False)):
        value = opts[key]
        if value is None and allow_none:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float, np.floating, np.integer))
            or not math.isfinite(value)
            or value < 0
            or (key == "rel_tol" and value >= 1)
        ):
            raise ValueError(
                f"w2_exact: {key} must be a finite number ≥ 0{' below 1' if key == 'rel_tol' else ''}"
                f"{' or None' if allow_none else ''}, got {value!r}"
            )
    warm = opts["warm"]
    if warm is not None and not (hasattr(warm, "v") and hasattr(warm, "perm")):
        raise TypeError(f"w2_exact: warm must be a previous W2Result, got {type(warm).__name__}")


def _target(opts, value_sq):
    return float(opts["tol"]) if opts["tol"] is not None else opts["rel_tol"] * value_sq


def _start(X, Y, opts, stats):
    """Candidate lists, starting assignment and starting column potentials (steps 1–2 of the module)."""
    n = X.shape[0]
    sync = np.arange(n, dtype=np.int64)
    start, v0 = sync, None
    if n <= opts["dense_base"]:  # every pair a candidate
        lists = [np.tile(sync, (n, 1))]
    else:
        lists, separation = candidate_neighbours(X, Y, opts["k"], opts["k_sync"], opts["workers"])
        lists.append(rank_pairs(X, Y))
        stats["separation"] = separation
        if opts["guide"] or (opts["guide"] is None and separation > LOCAL_SEPARATION):
            coarse_kw = {
                key: opts[key]
                for key in ("k", "k_sync", "k_dual", "cell_neighbours", "rel_tol", "per_row", "dense_base", "workers")
            }
            coarse_kw.update(max_rounds=COARSE_ROUNDS, fallback=False, guide=True)  # cells: always guided
            coarse_solve = functools.partial(w2_exact, **coarse_kw)  # the centroids' match: this solver, recursively
            g = _multiscale_guide(X, Y, opts["cell_neighbours"], opts["workers"], coarse_solve)
            start, v0 = g.start, g.v
            stats.update(start=g.kind, coarse=g.coarse)
            lists += g.lists
    warm = opts["warm"]
    if warm is not None:
        v_warm = np.asarray(warm.v, dtype=np.float64)
        if v_warm.shape != (n,) or not np.all(np.isfinite(v_warm)):
            raise ValueError("warm potentials must be finite with shape (N,)")
        v0 = v_warm
        p = np.asarray(warm.perm, dtype=np.int64)
        if p.shape == (n,) and np.unique(p).size == n and np.sum((X - Y[p]) ** 2) < np.sum((X - Y[start]) ** 2):
            start, stats["start"] = p, "warm"
    if v0 is not None and opts["k_dual"] > 0:
        lists.append(lifted_neighbours(Y, v0, X, opts["k_dual"], opts["workers"]))
    lists.append(start[:, None].copy())
    return lists, start, v0


def _reduced_cost_tol(opts, w2sq, potentials):
    """Reduced costs above −this cannot move the bound past the target, or are the rounding of the potentials:
    the simplex's pivoting threshold (potentials: its tree's) and the pricing's (the column potentials)."""
    base = PIVOT_FRACTION * (float(opts["tol"]) if opts.get("tol") is not None else opts["rel_tol"] * w2sq)
    return max(base, PIVOT_ROUNDING * _U * float(np.max(np.abs(potentials))), 1e-300)


def _restart(S, perm):
    """A fresh basis of the assignment ``perm`` on the arcs of S (after a cycle was cancelled outside it)."""
    n = S.n
    T = SparseAssignment.start(S.src[n : S.m].copy(), S.tgt[n : S.m] - n, S.cost[n : S.m].copy(), perm)
    T.pivots, T.degenerate = S.pivots, S.degenerate
    return T


def _with_local_duals(X, Y, S, perm, opts, stats):
    """The assignment re-solved where the rounding of the tree's potentials, not the reduced costs, limits the
    certificate: W2² far below the costs between clusters, whose spanning tree climbs through arcs of cost
    O(1) and leaves potentials whose last digits are the whole of c_ij − v_j inside a cluster.

    The simplex again on the arcs of S that cost at most LOCAL_COST_FACTOR times the assignment's dearest
    pair, from ``perm``: clusters joined only by dearer arcs hang from the root each by a root arc of cost 0,
    so each has potentials of its own size, and pivoting resolves them to their own rounding. Then the
    shortest-path potentials of its assignment (``_local_duals``), the smallest such potentials, and the
    certificate from them. Those potentials are feasible on the kept arcs only: the pairs the certificate
    finds below them join the kept arcs and the re-solve resumes (column generation, at most
    ``LOCAL_ROUNDS`` times). Returns (perm, v, bound, T) with T the restricted basis (to continue from), or
    None when a budget ran out."""
    n = S.n
    src, tgt, cost = S.src[n : S.m], S.tgt[n : S.m] - n, S.cost[n : S.m]
    keep = cost <= LOCAL_COST_FACTOR * float(np.max(_pair_costs(X, Y, perm)))
    T = SparseAssignment.start(src[keep].copy(), tgt[keep].copy(), cost[keep].copy(), perm)
    T.pivots, T.degenerate = S.pivots, S.degenerate
    stats["local_solves"] = stats.get("local_solves", 0) + 1
    for _ in range(LOCAL_ROUNDS):
        if not T.solve(_reduced_cost_tol(dict(tol=0.0), 0.0, T.pi), max_pivots=PIVOT_BUDGET * (T.n_arcs + n)):
            stats["pivot_budget_out"] = True
            return None
        local = _local_duals(T, T.assignment(), LOCAL_SCAN_BUDGET * (T.n_arcs + n))
        if local is None:
            stats["local_budget_out"] = True
            return None
        perm_l, v_l, changed = local
        if changed:  # a cycle the pivots could not see: the basis follows the new assignment
            stats["cycles_cancelled"] = stats.get("cycles_cancelled", 0) + 1
            T = _restart(T, perm_l)
        price_tol = _reduced_cost_tol(opts, float(np.mean(_pair_costs(X, Y, perm_l))), v_l)
        bound = _certificate(X, Y, perm_l, v_l, price_tol, opts["per_row"])
        new = bound.pricing.pairs
        if _meets(bound, _target(opts, bound.value_sq)) or new.size == 0:
            break
        T.add_arcs(new[:, 0], new[:, 1], _pair_costs(X[new[:, 0]], Y, new[:, 1]))
        stats["local_added_pairs"] = stats.get("local_added_pairs", 0) + int(new.shape[0])
    return perm_l, v_l, bound, T


def _solve(X, Y, opts) -> W2Result:
    n = X.shape[0]
    stats = dict(start="synchronous", coarse=None, separation=np.nan)
    lists, start, v0 = _start(X, Y, opts, stats)
    no_extra = np.empty(0, dtype=np.int64)
    indptr, cols, costs = _build_csr(X, Y, numba.typed.List(lists), no_extra, no_extra)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    start_cost = np.sum((X - Y[start]) ** 2, axis=1)
    # the starting potentials belong to the guide's (or warm) assignment; the synchronous start keeps 0
    root_cost = None if v0 is None or stats["start"] == "synchronous" else v0[start] - start_cost
    S = SparseAssignment.start(rows, cols, costs, start, root_cost)
    stats.update(start_excess=float(np.mean(start_cost)), pivots=0, degenerate=0, added_pairs=0)
    w2sq_est = float(np.mean(start_cost))
    rounds = 0
    finished = True
    while True:
        finished = S.solve(_reduced_cost_tol(opts, w2sq_est, S.pi), max_pivots=PIVOT_BUDGET * (S.n_arcs + n))
        perm = S.assignment()
        _, v = S.duals()
        w2sq_est = float(np.mean(_pair_costs(X, Y, perm)))
        price_tol = _reduced_cost_tol(opts, w2sq_est, v)
        bound = _certificate(X, Y, perm, v, price_tol, opts["per_row"])
        rounds += 1
        target = _target(opts, bound.value_sq)
        rounding = bound.gap - bound.plain_gap
        if not _meets(bound, target) and (rounding > 0.5 * target or not finished or bound.pricing.pairs.size == 0):
            local = _with_local_duals(X, Y, S, perm, opts, stats)
            if local is not None and local[2].error_bound < bound.error_bound:
                perm, v, bound, S = local
                target = _target(opts, bound.value_sq)
                finished = True
        if not finished:
            stats["pivot_budget_out"] = True
        if _meets(bound, target) or rounds >= opts["max_rounds"] or not finished:
            break
        new = bound.pricing.pairs
        if new.size == 0:  # nothing beats the assignment beyond the rounding: more passes cannot help
            break
        if rounds >= UNGUIDED_ROUNDS and stats["coarse"] is None and n > opts["dense_base"] and opts["guide"] is None:
            retry = _solve(X, Y, dict(opts, guide=True))
            retry.stats["unguided_rounds"] = rounds
            return retry
        S.add_arcs(new[:, 0], new[:, 1], _pair_costs(X[new[:, 0]], Y, new[:, 1]))
        stats["added_pairs"] += int(new.shape[0])
    stats.update(
        pivots=S.pivots,
        degenerate=S.degenerate,
        rounds=rounds,
        start_excess=stats["start_excess"] / max(w2sq_est, 1e-300) - 1.0,
    )
    if _meets(bound, target) or not opts["fallback"]:
        return _result(perm, bound, v, target, _meets(bound, target), rounds, False, S.n_arcs, stats)
    return _certified_fallback(X, Y, S, opts, stats, rounds)


def _result(perm, bound: _Bound, v, target, certified, rounds, fallback, n_candidates, stats) -> W2Result:
    return W2Result(
        value=float(np.sqrt(max(bound.value_sq, 0.0))),
        perm=perm,
        u=bound.pricing.rowmin,
        v=v,
        rounds=rounds,
        fallback=fallback,
        certified=bool(certified),
        gap_bound=float(bound.gap),
        n_candidates=n_candidates,
        stats=stats,
        error_bound=float(bound.error_bound),
        target=float(target),
    )


def _certified_fallback(X, Y, S, opts, stats, rounds) -> W2Result:
    """POT's network simplex, its plan certified by the same rule (``_certificate`` of its column duals, then
    of shortest-path potentials on the candidates and its plan), at FALLBACK_REL_TOL·W2² at most."""
    n = X.shape[0]
    perm, _, v = _pot_fallback(X, Y, opts["dense_max"])
    bound = _certificate(X, Y, perm, v, np.inf)
    target = (
        max(_target(opts, bound.value_sq), FALLBACK_REL_TOL * bound.value_sq)
        if opts["tol"] is None
        else float(opts["tol"])
    )
    if not _meets(bound, target):
        S.add_arcs(np.arange(n, dtype=np.int64), perm, _pair_costs(X, Y, perm))
        local = _with_local_duals(X, Y, S, perm, opts, stats)
        if local is not None and local[2].error_bound < bound.error_bound:
            perm, v, bound, S = local
            target = (
                max(_target(opts, bound.value_sq), FALLBACK_REL_TOL * bound.value_sq)
                if opts["tol"] is None
                else float(opts["tol"])
            )
    return _result(perm, bound, v, target, _meets(bound, target), rounds, True, S.n_arcs, stats)


@numba.njit(parallel=True, cache=True)
def _dense_cost(X, Y, C):
    """C_ij = |x_i − y_j|² by differences, as in the sparse solver and the certificate (no expansion)."""
    for i in numba.prange(X.shape[0]):
        for j in range(Y.shape[0]):
            C[i, j] = _sqdist(X, Y, i, j)


def _pot_fallback(X, Y, dense_max):
    """POT's network simplex on the whole problem: the permutation and the duals u, v (|x − y|² cost)."""
    n = X.shape[0]
    a = np.full(n, 1.0 / n)
    if n <= dense_max:
        C = np.empty((n, n))
        _dense_cost(X, Y, C)
        G, log = ot.emd(a, a, C, numItermax=max(100_000, 100 * n * n), log=True)
        if log["result_code"] != 1:
            raise RuntimeError(f"POT fallback did not reach an optimal plan: {log['warning']}")
        perm = np.argmax(G, axis=1)
        u, v = log["u"], log["v"]
    else:
        _, log = ot.emd2_lazy(X, Y, a, a, numItermax=max(100_000, 100 * n * n), log=True, return_matrix=True)
        if log["result_code"] != 1:
            raise RuntimeError(f"POT fallback did not reach an optimal plan: {log['warning']}")
        G = log["G"].tocsr()
        perm = np.asarray(G.argmax(axis=1)).ravel()
        u, v = log["u"], log["v"]
    # POT's duals are for the weighted problem (scaled by nothing: c_ij − u_i − v_j ≥ 0 on the cost itself)
    return perm.astype(np.int64), np.asarray(u, float), np.asarray(v, float)


def _binary_exponent(X, Y) -> int:
    """e with the largest |coordinate|·2^e in [0.5, 1), when the clouds' coordinates are so large that squared
    differences overflow or so small that they underflow (else 0: the pipeline's clouds are solved as given).
    W2(sX, sY) = s·W2(X, Y), and multiplying by a power of two is exact (``np.ldexp``, subnormals included)."""
    top = max(float(np.max(np.abs(X))), float(np.max(np.abs(Y))))
    if top == 0.0 or 2.0**-SCALE_EXPONENT <= top <= 2.0**SCALE_EXPONENT:
        return 0
    return -math.frexp(top)[1]


def _up(x: float, e: int) -> float:
    """x·2^e rounded up (a bound stays a bound when the result is subnormal, or 0 would be)."""
    r = float(np.ldexp(x, e))
    return r if np.ldexp(r, -e) >= x else float(np.nextafter(r, np.inf))
