"""Exact W2 between two equal-size uniform clouds, certified on all N² pairs.

With uniform weights 1/N on both sides, optimal transport for the cost c_ij = |x_i − y_j|² is
an assignment problem (Birkhoff): W2² = min_π (1/N) Σ_i c_{i,π(i)}. It is solved on a sparse
set of candidate pairs by a primal network simplex (``lowtemp.transport.simplex``), priced on all N²
pairs without storing them, and grown where the pricing finds better pairs:

1. Multiscale guide. Both clouds are cut into balanced cells of ``CELL_SIZE`` tokens
   (``balanced_cells``: median splits of the widest coordinate), and the cells' centroids are
   matched by the same solver, recursively, down to ``DENSE_BASE`` points (where every pair is
   a candidate). The match gives (a) a starting assignment: the tokens of matched cells paired
   optimally inside each pair of cells, or the synchronous pairing x_i ↔ y_i if that costs less;
   (b) starting column potentials: the coarse ones extended to first order,
   v_j = V_B − 2⟨y_j − m_B, m_A − m_B⟩ for y_j in cell B matched from cell A (the separable part of
   |x − y|² around the two centroids); (c) candidates: the tokens of the ``CELL_NEIGHBOURS`` Y cells
   nearest to a row's matched cell. Clouds far apart (after the departure) are exactly where
   nearest neighbours say nothing about the plan and the matched cells do.
2. Candidates (CSR, O(N·k) memory): besides the matched cells, the k nearest y's of x_i, the
   k_sync nearest y's of y_i, the ``k_dual`` columns minimising c_ij − v_j under the starting
   potentials (``lifted_neighbours``), the starting assignment, (i, i) and the lexicographic rank
   pairs (``rank_pairs``: every exact copy of a token gets its own partner).
3. Network simplex on the candidates from the starting basis (``simplex.SparseAssignment``):
   exact on the candidate graph, insensitive to the degeneracy of clustered clouds.
4. Pricing and certificate. A streamed numba pass over all N² pairs (parallel over rows) gives
   the c-transform u*_i = min_j (c_ij − v_j) of the simplex's column potentials, which makes (u*, v)
   dual feasible for the whole problem by construction. Weak duality then bounds the error of
   the assignment π: W2²(π) − W2²_opt ≤ (1/N) Σ_i (c_{iπ(i)} − v_{π(i)} − u*_i) = ``gap_bound``,
   every term bounded with the rounding of its own arithmetic (``_rounding_of``), so the bound holds
   for the exact costs of the given coordinates; ``error_bound`` adds the rounding of W2²(π).
   Certified: error_bound ≤ ``rel_tol``·W2² (or ``tol``) and below W2² (or both 0). Where the tree's
   O(1) potentials leave the bound to rounding (W2² far below the costs between clusters), the
   assignment is re-solved on its cheap arcs with potentials of their own size (``_with_local_duals``).
   The pass also returns, per row, the columns that beat the row's assignment; if the bound
   misses the target they join the candidate set and the simplex resumes from its basis (column
   generation), up to ``max_rounds`` passes; then POT's network simplex (``ot.emd`` dense up to
   ``DENSE_MAX`` tokens, ``ot.emd2_lazy`` above) gives the answer, certified by the same bound at
   ``FALLBACK_REL_TOL``.

Everything is sequential except the nearest-neighbour queries and the pricing pass (parallel
over rows, each row writing its own output slots), so the same input gives the same bits.
Its numba functions (and the simplex's) are cached on disk (numba's cache, next to the module or in
``NUMBA_CACHE_DIR``): a distances job would otherwise spend about 9 s compiling them; a cached load gives
the same bits as a fresh compile (``tests/workflow/test_numba_cache.py``; none of them uses fastmath).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numba
import numpy as np
import ot
from scipy.spatial import cKDTree

from .limits import DENSE_BASE, DENSE_MAX
from .simplex import SparseAssignment

#: default absolute tolerance of ``certify`` on reduced costs (costs are ≤ 4 on the sphere)
DEFAULT_TOL = 1e-12
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
#: unit roundoff of float64, and the cost below which a square of a coordinate difference may be subnormal
_U = 2.0**-53
_TINY = 2.0**-969
#: tokens per cell of the multiscale guide, and how many Y cells (nearest to the matched one) give
#: their tokens to every row of a cell (8 rather than 4 plus the lifted candidates of ``k_dual``: as
#: fast at N = 4096 on the default run's snapshots, 12 % faster at 16384, where the lifted query in
#: four dimensions costs 50x a plain nearest-neighbour query)
CELL_SIZE = 4
CELL_NEIGHBOURS = 8
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
#: KD-tree queries of fewer points run on one thread
THREADED_QUERY_MIN = 16384
#: pricing passes of the finest level before the fallback
MAX_ROUNDS = 10
#: columns a pricing pass adds per row that beats its assignment (16: one pass fewer on some of the default
#: run's snapshots than 8, 5–10 % less time)
PER_ROW = 16
#: the 24 orders of four tokens: matched cells of CELL_SIZE = 4 are paired by trying them all
_PERMS4 = np.array(list(itertools.permutations(range(4))), dtype=np.int64)


@dataclass
class Certificate:
    """Outcome of :func:`certify`.

    ok: every pair has reduced cost ≥ −tol, π is a permutation and tight to ``tol``.
    pairs: up to ``max_pairs`` violating pairs (i, j), shape (m, 2), the most negative
    reduced costs of each row first, rows in increasing order.
    n_violations: total number of pairs with reduced cost < −tol (all N² counted).
    min_reduced: min over all pairs of c_ij − u_i − v_j.
    max_slack: max_i |c_{iπ(i)} − u_i − v_{π(i)}| (complementary slackness).
    """

    ok: bool
    pairs: np.ndarray
    n_violations: int
    min_reduced: float
    max_slack: float
    is_permutation: bool


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


# ----------------------------------------------------------------------------- numba kernels


@numba.njit(cache=True)
def _sqdist(X, Y, i, j):
    s = 0.0
    for a in range(X.shape[1]):
        t = X[i, a] - Y[j, a]
        s += t * t
    return s


@numba.njit(cache=True)
def _build_csr(X, Y, nbr_lists, extra_i, extra_j):
    """CSR of the union, per row, of the columns in nbr_lists[:, i, :] (−1 = none), i and extra pairs.

    Columns of each row sorted increasingly, duplicates removed; costs |x_i − y_j|².
    """
    n = X.shape[0]
    counts = np.zeros(n + 1, dtype=np.int64)
    for e in range(extra_i.shape[0]):
        counts[extra_i[e] + 1] += 1
    extra_ptr = np.cumsum(counts)
    extra_cols = np.empty(extra_i.shape[0], dtype=np.int64)
    fill = extra_ptr[:-1].copy()
    for e in range(extra_i.shape[0]):
        extra_cols[fill[extra_i[e]]] = extra_j[e]
        fill[extra_i[e]] += 1
    width = 1
    for m in range(len(nbr_lists)):
        width += nbr_lists[m].shape[1]
    buf = np.empty(width + extra_i.shape[0], dtype=np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    total = 0
    cols_all = np.empty(n * width + extra_i.shape[0], dtype=np.int64)
    for i in range(n):
        m = 0
        buf[m] = i
        m += 1
        for lst in nbr_lists:
            for t in range(lst.shape[1]):
                j = lst[i, t]
                if j >= 0:
                    buf[m] = j
                    m += 1
        for e in range(extra_ptr[i], extra_ptr[i + 1]):
            buf[m] = extra_cols[e]
            m += 1
        srt = np.sort(buf[:m])
        last = -1
        for t in range(m):
            if srt[t] != last:
                cols_all[total] = srt[t]
                total += 1
                last = srt[t]
        indptr[i + 1] = total
    cols = cols_all[:total].copy()
    costs = np.empty(total, dtype=np.float64)
    for i in range(n):
        for e in range(indptr[i], indptr[i + 1]):
            costs[e] = _sqdist(X, Y, i, cols[e])
    return indptr, cols, costs


@numba.njit(cache=True, inline="always")
def _keep_most_negative(worst_r, worst_j, nkeep, r, j):
    """Insert (r, j) into the row's list of its most negative reduced costs, kept sorted increasingly."""
    per_row = worst_r.size
    if nkeep < per_row or r < worst_r[per_row - 1]:
        pos = nkeep if nkeep < per_row else per_row - 1
        while pos > 0 and worst_r[pos - 1] > r:
            if pos < per_row:
                worst_r[pos] = worst_r[pos - 1]
                worst_j[pos] = worst_j[pos - 1]
            pos -= 1
        worst_r[pos] = r
        worst_j[pos] = j
        if nkeep < per_row:
            nkeep += 1
    return nkeep


@numba.njit(cache=True, inline="always")
def _rounding_of(s, r, g, e, underflow, uf):
    """Bound on |r̂ − r| for r̂ = fl(ĉ − v_j), ĉ = fl(Σ_a fl(x_a − y_a)²): g·ĉ (the cost's own roundings)
    + e·|r̂| (the subtraction, and the one that applies this bound), plus the subnormal spacing when
    ĉ may have underflowed (``underflow``: some coordinate difference was not zero)."""
    b = g * s + e * abs(r)
    if underflow:
        b += uf
    return b


#: rows per task of the pricing kernel (each task holds three length-N buffers)
PRICE_ROWS_PER_TASK = 64


@numba.njit(cache=True)
def _price_row(i, X, YT, v, g, e, uf, sq, red, low):
    """Row i's r_ij = fl(ĉ_ij − v_j) into ``red`` and r_ij − (rounding bound) into ``low``, for every column j.

    The squares are summed dimension by dimension over whole rows of Y (ĉ = fl(fl(t_0²) + fl(t_1²)) + …,
    the same sequence of roundings as a sum per pair), so that each loop is elementwise and the compiler
    vectorises it. Where ĉ is below ``_TINY`` and some difference is not zero, a square may have
    underflowed: those pairs' bounds get the subnormal term ``uf`` (``_rounding_of``)."""
    n = YT.shape[1]
    d = X.shape[1]
    tiny = 0
    if d == 3:  # the pipeline's sphere: one fused loop
        x0 = X[i, 0]
        x1 = X[i, 1]
        x2 = X[i, 2]
        Y0 = YT[0]
        Y1 = YT[1]
        Y2 = YT[2]
        for j in range(n):
            t0 = x0 - Y0[j]
            t1 = x1 - Y1[j]
            t2 = x2 - Y2[j]
            s = t0 * t0 + t1 * t1 + t2 * t2
            sq[j] = s
            r = s - v[j]
            red[j] = r
            low[j] = r - (g * s + e * abs(r))
            tiny += s < _TINY
    else:
        xa = X[i, 0]
        Ya = YT[0]
        for j in range(n):
            t = xa - Ya[j]
            sq[j] = t * t
        for a in range(1, d):
            xa = X[i, a]
            Ya = YT[a]
            for j in range(n):
                t = xa - Ya[j]
                sq[j] += t * t
        for j in range(n):
            s = sq[j]
            r = s - v[j]
            red[j] = r
            low[j] = r - (g * s + e * abs(r))
            tiny += s < _TINY
    if tiny > 0:  # rare: a pair with ĉ below _TINY may have lost a subnormal square
        for j in range(n):
            s = sq[j]
            if s < _TINY:
                nz = False
                for a in range(d):
                    nz = nz or X[i, a] != YT[a, j]
                if nz:
                    low[j] = red[j] - _rounding_of(s, red[j], g, e, True, uf)


@numba.njit(cache=True)
def _row_minima(red, low):
    """(min_j red_j, min_j low_j), four running minima each (independent chains; a minimum is exact)."""
    n = red.shape[0]
    m0 = m1 = m2 = m3 = np.inf
    l0 = l1 = l2 = l3 = np.inf
    for j in range(0, n - 3, 4):
        m0 = min(m0, red[j])
        m1 = min(m1, red[j + 1])
        m2 = min(m2, red[j + 2])
        m3 = min(m3, red[j + 3])
        l0 = min(l0, low[j])
        l1 = min(l1, low[j + 1])
        l2 = min(l2, low[j + 2])
        l3 = min(l3, low[j + 3])
    for j in range(n - n % 4, n):
        m0 = min(m0, red[j])
        l0 = min(l0, low[j])
    return min(min(m0, m1), min(m2, m3)), min(min(l0, l1), min(l2, l3))


@numba.njit(parallel=True, cache=True)
def _price_kernel(
    X,
    YT,
    perm,
    v,
    base,
    below_assigned,
    tol,
    g,
    e,
    uf,
    keep_j,
    keep_r,
    counts,
    rowmin,
    assigned,
    rowmin_lo,
    assigned_hi,
):
    """All pairs, streamed by rows: r_ij = c_ij − v_j (c by differences, the same arithmetic everywhere).

    Per row: rowmin_i = min_j r_ij, assigned_i = r_{i,perm(i)}, and the pairs with r_ij < t_i − tol
    (t_i = assigned_i if ``below_assigned`` else base_i): their count and the ``keep_j.shape[1]``
    smallest r_ij − t_i, kept sorted with their columns. A row's pairs are searched only if its minimum
    is below its threshold (after the first pricing passes, few rows are), from column i on, so rows that
    tie (duplicate tokens) keep different columns.
    With the rounding of every r̂_ij bounded (``_rounding_of``): rowmin_lo_i ≤ the exact min_j r_ij and
    assigned_hi_i ≥ the exact r_{iπ(i)} (the rigorous certificate, ``_certificate``).
    Y is transposed (d, N) so that every pass reads it contiguously; rows go in tasks of
    ``PRICE_ROWS_PER_TASK``, each with its own buffers (rows write only their own slots: the same bits
    on any number of threads)."""
    n = X.shape[0]
    d = X.shape[1]
    tasks = (n + PRICE_ROWS_PER_TASK - 1) // PRICE_ROWS_PER_TASK
    for task in numba.prange(tasks):
        sq = np.empty(n)
        red = np.empty(n)
        low = np.empty(n)
        for i in range(task * PRICE_ROWS_PER_TASK, min(n, (task + 1) * PRICE_ROWS_PER_TASK)):
            j0 = perm[i]
            a0 = 0.0
            nz = False
            for a in range(d):
                t = X[i, a] - YT[a, j0]
                nz = nz or t != 0.0
                a0 += t * t
            s0 = a0
            a0 = a0 - v[j0]
            assigned[i] = a0
            assigned_hi[i] = a0 + _rounding_of(s0, a0, g, e, nz and s0 < _TINY, uf)
            ref = a0 if below_assigned else base[i]
            cut = ref - tol
            _price_row(i, X, YT, v, g, e, uf, sq, red, low)
            m, lo = _row_minima(red, low)
            rowmin[i] = m
            rowmin_lo[i] = lo
            cnt = 0
            if m < cut:
                nkeep = 0
                for jj in range(n):
                    j = jj + i
                    if j >= n:
                        j -= n
                    r = red[j]
                    if r < cut:
                        cnt += 1
                        nkeep = _keep_most_negative(keep_r[i], keep_j[i], nkeep, r - ref, j)
            counts[i] = cnt


@dataclass
class _Pricing:
    """One streamed pass over all pairs (``_price_all_pairs``)."""

    rowmin: np.ndarray  # min_j (c_ij − v_j): the c-transform of v
    assigned: np.ndarray  # c_{iπ(i)} − v_{π(i)}
    counts: np.ndarray  # pairs per row below the row's threshold
    pairs: np.ndarray  # (m, 2): the kept pairs, most negative first within each row, rows increasing
    rowmin_lo: np.ndarray  # ≤ the exact c-transform, the rounding of every reduced cost accounted for
    assigned_hi: np.ndarray  # ≥ the exact c_{iπ(i)} − v_{π(i)}


def _rounding_constants(d):
    """(g, e, uf) of ``_rounding_of`` for clouds in R^d.

    ĉ = fl(Σ_a fl(fl(x_a − y_a)²)) is Σ_a c_a(1 + θ_a), |θ_a| ≤ γ_{d+1} (one rounding in the difference,
    counted twice by the square, one in the square, d − 1 in the sum; γ_k = ku/(1 − ku), u = 2⁻⁵³), so
    |ĉ − c| ≤ γ_{d+1}/(1 − γ_{d+1})·ĉ; fl(ĉ − v) and the subtraction of the bound itself each add at most
    u·|r̂|(1 + O(u)). The constants round these up (d + 4 for d + 1, 3u for 2u) so that the O(u²) terms and
    the rounding of g·ĉ + e·|r̂| are covered. Below ĉ = ``_TINY`` a square may have lost up to half the
    subnormal spacing 2⁻¹⁰⁷⁴ (sums and differences of subnormals are exact): uf = d·2⁻¹⁰⁷⁴ more."""
    return (d + 4) * _U, 3.0 * _U, d * 2.0**-1074


def _price_all_pairs(X, Y, perm, v, tol, *, base=None, per_row=8, max_pairs=None) -> _Pricing:
    """Stream c_ij − v_j over all N² pairs (extra memory O(N·per_row)); thresholds base_i − tol, or
    (without ``base``) the row's assigned value − tol, i.e. the columns that beat the assignment."""
    n = X.shape[0]
    per_row = max(1, int(per_row))
    keep_j = np.full((n, per_row), -1, dtype=np.int64)
    keep_r = np.zeros((n, per_row))
    counts = np.zeros(n, dtype=np.int64)
    rowmin, assigned, rowmin_lo, assigned_hi = (np.empty(n) for _ in range(4))
    below = base is None
    g, e, uf = _rounding_constants(X.shape[1])
    _price_kernel(
        X,
        np.ascontiguousarray(Y.T),
        perm,
        np.ascontiguousarray(v, dtype=np.float64),
        np.zeros(n) if below else np.ascontiguousarray(base, dtype=np.float64),
        below,
        float(tol),
        g,
        e,
        uf,
        keep_j,
        keep_r,
        counts,
        rowmin,
        assigned,
        rowmin_lo,
        assigned_hi,
    )
    kept = np.minimum(counts, per_row)
    rows = np.repeat(np.arange(n), kept)
    cols = keep_j[np.arange(per_row)[None, :] < kept[:, None]]
    pairs = np.stack([rows, cols], axis=1)
    if max_pairs is not None:
        pairs = pairs[:max_pairs]
    return _Pricing(
        rowmin=rowmin, assigned=assigned, counts=counts, pairs=pairs, rowmin_lo=rowmin_lo, assigned_hi=assigned_hi
    )


@dataclass
class _Bound:
    """The rigorous certificate of an assignment π from column potentials v (``_certificate``).

    gap: ≥ W2²(π) − W2²_opt in exact arithmetic on the given coordinates: (1/N) Σ_i (assigned_hi_i −
    rowmin_lo_i), summed exactly (math.fsum) and rounded up; plain_gap: the same sum without the rounding
    terms (what the reduced costs alone say); value_sq: W2²(π) as computed, value_err ≥ its rounding.
    """

    gap: float
    plain_gap: float
    value_sq: float
    value_err: float
    pricing: _Pricing

    @property
    def error_bound(self) -> float:
        """≥ |value_sq − W2²_opt|: the assignment's excess over the optimum and the rounding of its cost."""
        return self.gap + self.value_err


def _certificate(X, Y, perm, v, price_tol, per_row=8) -> _Bound:
    """Price all pairs with the column potentials v and bound the assignment's distance to the optimum.

    The c-transform u*_i = min_j (c_ij − v_j) makes (u*, v) dual feasible for the whole problem, so by weak
    duality W2²(π) − W2²_opt ≤ (1/N) Σ_i (c_{iπ(i)} − v_{π(i)} − u*_i), for any v. Every term is bounded
    with the rounding of its own arithmetic (``_price_kernel``'s rowmin_lo and assigned_hi), so the bound
    holds for the exact costs of the given coordinates, whatever the size of the potentials."""
    n = X.shape[0]
    pricing = _price_all_pairs(X, Y, perm, v, price_tol, per_row=per_row)
    terms = pricing.assigned_hi - pricing.rowmin_lo  # each ≥ 0 up to one rounding, u·|term|
    gap = _mean_up(math.fsum(terms.tolist()) * (1.0 + 4.0 * _U), n)
    plain = math.fsum((pricing.assigned - pricing.rowmin).tolist()) / n
    pair_costs = _pair_costs(X, Y, perm)
    value_sq = math.fsum(pair_costs.tolist()) / n
    g, _, uf = _rounding_constants(X.shape[1])
    underflow = float(np.count_nonzero((pair_costs < _TINY) & np.any(X != Y[perm], axis=1))) * uf
    value_err = (g + 3.0 * _U) * value_sq + _mean_up(underflow, n)
    return _Bound(gap=max(gap, 0.0), plain_gap=plain, value_sq=value_sq, value_err=value_err, pricing=pricing)


def _mean_up(total: float, n: int) -> float:
    """total / n rounded up (a sum of subnormal rounding terms must not become 0 by the division)."""
    r = total / n
    return r if r * n >= total else float(np.nextafter(r, np.inf))


def _pair_costs(X, Y, perm):
    """|x_i − y_perm(i)|², by differences summed coordinate by coordinate (as the pricing kernel); with X's
    rows of some pairs and ``perm`` their columns, the costs of those pairs."""
    D = X - Y[perm]
    out = D[:, 0] * D[:, 0]
    for a in range(1, X.shape[1]):
        out = out + D[:, a] * D[:, a]
    return out


def certify(X, Y, perm, u, v, tol: float = DEFAULT_TOL, *, per_row: int = 8, max_pairs: int = 1_000_000) -> Certificate:
    """Check the optimality of the assignment ``perm`` for the cost |x_i − y_j|² with duals (u, v).

    Streams over all N² pairs (numba, parallel over rows; N² numbers are never stored):
    dual feasibility c_ij − u_i − v_j ≥ −tol for all i, j, complementary slackness
    |c_{i,perm(i)} − u_i − v_{perm(i)}| ≤ tol for all i, and that perm is a permutation.
    Extra memory O(N·per_row). Returns a :class:`Certificate` whose ``pairs`` holds at most
    ``per_row`` violating pairs per row (the most negative) and ``max_pairs`` in total,
    rows in increasing order.
    """
    X = as_cloud(X, "X")
    Y = as_cloud(Y, "Y")
    n = X.shape[0]
    if Y.shape != X.shape:
        raise ValueError(f"X and Y must have the same shape, got {X.shape} and {Y.shape}")
    perm = np.ascontiguousarray(perm, dtype=np.int64)
    u = np.ascontiguousarray(u, dtype=np.float64)
    v = np.ascontiguousarray(v, dtype=np.float64)
    is_perm = perm.shape == (n,) and bool(np.all((perm >= 0) & (perm < n))) and np.unique(perm).size == n
    p = _price_all_pairs(
        X,
        Y,
        np.clip(perm, 0, n - 1) if perm.shape == (n,) else np.zeros(n, np.int64),
        v,
        float(tol),
        base=u,
        per_row=per_row,
        max_pairs=max_pairs,
    )
    n_viol = int(p.counts.sum())
    max_slack = float(np.max(np.abs(p.assigned - u))) if n else 0.0
    ok = is_perm and n_viol == 0 and max_slack <= tol
    return Certificate(
        ok=bool(ok),
        pairs=p.pairs,
        n_violations=n_viol,
        min_reduced=float(np.min(p.rowmin - u)) if n else 0.0,
        max_slack=max_slack,
        is_permutation=bool(is_perm),
    )


# ----------------------------------------------------------------------------- local potentials


@numba.njit(cache=True)
def _shortest_path_potentials(n, indptr, cols, costs, perm, max_scans, d_row, d_col, pred_row, pred_col):
    """Potentials of the assignment ``perm`` on the arcs (CSR by row) as shortest-path distances.

    The residual graph of perm: arcs row i → column j of cost c_ij (the matched one included) and
    column perm(i) → row i of cost −c_{i,perm(i)}, every row a source at distance 0. If perm is optimal
    on the arcs there is no negative cycle, and the distances (d_row ≤ 0, d_col) satisfy
    c_ij + d_row_i − d_col_j ≥ 0 on every arc, with equality on the matched ones: u = −d_row, v = d_col
    are optimal duals on the arcs. Unlike a spanning tree's potentials, which climb by whole costs
    through every cluster on the way from the root, they are sums of costs along paths that improve
    on 0: of the size of the costs near the assignment, so c_ij − v_j keeps its digits when W2² is far
    below the clouds' extent. Label-correcting (FIFO queue); a label moves only when it improves by
    more than the rounding of the two labels, so rounding alone never relabels.

    Returns (status, scans): status 0 done; 1 a negative cycle was found and cancelled in perm (the rows
    on it take the column that follows them: call again); 2 ``max_scans`` ran out."""
    inf = np.inf
    inv = np.empty(n, np.int64)
    matched = np.empty(n)
    for i in range(n):
        inv[perm[i]] = i
        matched[i] = inf
        for e in range(indptr[i], indptr[i + 1]):
            if cols[e] == perm[i]:
                matched[i] = costs[e]
    nodes = 2 * n
    queue = np.empty(nodes + 1, np.int64)
    inq = np.zeros(nodes, np.bool_)
    length = np.zeros(nodes, np.int64)
    for i in range(n):
        d_row[i] = 0.0
        pred_row[i] = -1
        d_col[i] = inf
        pred_col[i] = -1
        queue[i] = i
        inq[i] = True
    head = 0
    tail = n
    count = n
    scans = 0
    eps = 8.0 * _U
    while count > 0:
        w = queue[head]
        head += 1
        if head > nodes:
            head = 0
        count -= 1
        inq[w] = False
        scans += 1
        if scans > max_scans:
            return 2, scans
        if w < n:  # a row: its arcs to columns
            for e in range(indptr[w], indptr[w + 1]):
                j = cols[e]
                nd = d_row[w] + costs[e]
                old = d_col[j]
                if old == inf or nd < old - eps * (abs(nd) + abs(old)):
                    d_col[j] = nd
                    pred_col[j] = w
                    length[n + j] = length[w] + 1
                    if length[n + j] > nodes and _cancel_cycle(n, n + j, perm, pred_row, pred_col):
                        return 1, scans
                    if not inq[n + j]:
                        inq[n + j] = True
                        queue[tail] = n + j
                        tail += 1
                        if tail > nodes:
                            tail = 0
                        count += 1
        else:  # a column: back to the row matched to it
            j = w - n
            i = inv[j]
            nd = d_col[j] - matched[i]
            old = d_row[i]
            if nd < old - eps * (abs(nd) + abs(old)):
                d_row[i] = nd
                pred_row[i] = j
                length[i] = length[w] + 1
                if length[i] > nodes and _cancel_cycle(n, i, perm, pred_row, pred_col):
                    return 1, scans
                if not inq[i]:
                    inq[i] = True
                    queue[tail] = i
                    tail += 1
                    if tail > nodes:
                        tail = 0
                    count += 1
    return 0, scans


@numba.njit(cache=True)
def _cancel_cycle(n, start, perm, pred_row, pred_col):
    """Walk the predecessors from ``start`` (a row < n or a column n + j); if they close a cycle, give every
    row on it the column it reaches on the cycle and return True (a label path longer than the number of
    nodes need not be a cycle any more: its predecessors may have moved since)."""
    nodes = 2 * n
    seen = np.zeros(nodes, np.bool_)
    w = start
    while not seen[w]:  # at most 2n steps: then a node repeats
        seen[w] = True
        p = pred_row[w] if w < n else pred_col[w - n]
        if p < 0:  # reached a source row: no cycle
            return False
        w = n + p if w < n else p
    # w is on the cycle: go round it once, giving each row the column its arc on the cycle leads to
    first = w
    while True:
        if w >= n:
            i = pred_col[w - n]
            perm[i] = w - n
            w = i
        else:
            w = n + pred_row[w]
        if w == first:
            return True


def _local_duals(S: SparseAssignment, perm, max_scans):
    """Shortest-path potentials of ``perm`` on the arcs of S (``_shortest_path_potentials``), cancelling
    negative cycles on the way. Returns (perm, v, changed) or None when the scan budget ran out."""
    n = S.n
    rows, cols, costs = S.src[n : S.m], S.tgt[n : S.m] - n, S.cost[n : S.m]
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    cols, costs = np.ascontiguousarray(cols[order]), np.ascontiguousarray(costs[order])
    perm = perm.copy()
    d_row, d_col = np.empty(n), np.empty(n)
    pred_row, pred_col = np.empty(n, np.int64), np.empty(n, np.int64)
    budget, changed = int(max_scans), False
    while budget > 0:
        status, scans = _shortest_path_potentials(
            n, indptr, cols, costs, perm, budget, d_row, d_col, pred_row, pred_col
        )
        budget -= scans
        if status == 0:
            return perm, d_col.copy(), changed
        if status == 2:
            return None
        changed = True
    return None


# ----------------------------------------------------------------------------- the multiscale guide


@numba.njit(cache=True)
def _balanced_cells(P, size):
    n = P.shape[0]
    d = P.shape[1]
    idx = np.arange(n)
    lo_stack = np.empty(n + 2, dtype=np.int64)
    hi_stack = np.empty(n + 2, dtype=np.int64)
    leaf_lo = np.empty(n + 1, dtype=np.int64)
    leaf_hi = np.empty(n + 1, dtype=np.int64)
    top = 0
    nleaves = 0
    lo_stack[0] = 0
    hi_stack[0] = n
    top = 1
    while top > 0:
        top -= 1
        lo = lo_stack[top]
        hi = hi_stack[top]
        if hi - lo <= size:
            leaf_lo[nleaves] = lo
            leaf_hi[nleaves] = hi
            nleaves += 1
            continue
        axis = 0
        widest = -1.0
        for a in range(d):
            mn = np.inf
            mx = -np.inf
            for t in range(lo, hi):
                x = P[idx[t], a]
                mn = min(mn, x)
                mx = max(mx, x)
            if mx - mn > widest:
                widest = mx - mn
                axis = a
        seg = idx[lo:hi].copy()
        keys = np.empty(hi - lo)
        for t in range(hi - lo):
            keys[t] = P[seg[t], axis]
        order = np.argsort(keys, kind="mergesort")
        for t in range(hi - lo):
            idx[lo + t] = seg[order[t]]
        half = (hi - lo) // 2
        lo_stack[top] = lo + half
        hi_stack[top] = hi
        top += 1
        lo_stack[top] = lo
        hi_stack[top] = lo + half
        top += 1
    cells = np.full((nleaves, size), -1, dtype=np.int64)
    for c in range(nleaves):
        for t in range(leaf_hi[c] - leaf_lo[c]):
            cells[c, t] = idx[leaf_lo[c] + t]
    return cells


def balanced_cells(P, size: int) -> np.ndarray:
    """Cells of at most ``size`` points of P (N, d): halve at the median of the widest coordinate
    (stable sort, so ties split by index) until a cell has ≤ size points. Returns an (m, size) index
    array, −1 padding the smaller cells; for N = size·2^L every cell has exactly ``size`` points."""
    P = np.ascontiguousarray(P, dtype=np.float64)
    if P.shape[0] == 0:
        return np.full((0, max(int(size), 1)), -1, dtype=np.int64)
    return _balanced_cells(P, max(int(size), 1))


def _centroids(P, cells):
    counts = np.sum(cells >= 0, axis=1)
    sums = np.zeros((cells.shape[0], P.shape[1]))
    for t in range(cells.shape[1]):
        ok = cells[:, t] >= 0
        sums[ok] += P[cells[ok, t]]
    return sums / counts[:, None], counts


def _cell_of(cells, n):
    out = np.empty(n, dtype=np.int64)
    out[cells[cells >= 0]] = np.nonzero(cells >= 0)[0]
    return out


@numba.njit(cache=True)
def _paired_cells(X, Y, CX, CY, match, perms):
    """The tokens of X cell a paired with those of Y cell match[a]: the best of the 24 orders when both
    hold 4 tokens, in order otherwise; the tokens left over (cells of unequal size) paired in order."""
    n = X.shape[0]
    perm = np.full(n, -1, dtype=np.int64)
    used = np.zeros(n, dtype=np.bool_)
    width = CX.shape[1]
    for a in range(CX.shape[0]):
        rows = CX[a]
        cols = CY[match[a]]
        na = 0
        nb = 0
        for t in range(width):
            if rows[t] >= 0:
                na += 1
            if cols[t] >= 0:
                nb += 1
        if na == 4 and nb == 4 and width == 4:
            best = np.inf
            bp = 0
            for p in range(perms.shape[0]):
                s = 0.0
                for t in range(4):
                    s += _sqdist(X, Y, rows[t], cols[perms[p, t]])
                if s < best:
                    best = s
                    bp = p
            for t in range(4):
                perm[rows[t]] = cols[perms[bp, t]]
                used[cols[perms[bp, t]]] = True
        else:
            for t in range(min(na, nb)):
                perm[rows[t]] = cols[t]
                used[cols[t]] = True
    q = 0
    for i in range(n):
        if perm[i] < 0:
            while used[q]:
                q += 1
            perm[i] = q
            used[q] = True
    return perm


@dataclass
class _Guide:
    """What the matched cells of a coarser solve give the fine level."""

    start: np.ndarray  # a starting assignment (perm)
    v: np.ndarray  # starting column potentials
    lists: list  # candidate lists (N, ·)
    kind: str  # "cells" or "synchronous": which starting assignment was cheaper
    coarse: dict  # the coarse solve's summary


def _multiscale_guide(X, Y, neighbours, workers, coarse_kw) -> _Guide:
    n = X.shape[0]
    CX, CY = balanced_cells(X, CELL_SIZE), balanced_cells(Y, CELL_SIZE)
    (mX, _), (mY, _) = _centroids(X, CX), _centroids(Y, CY)
    coarse = w2_exact(mX, mY, **coarse_kw)
    match = coarse.perm
    source = np.argsort(match)  # Y cell → the X cell matched to it
    cell_y = _cell_of(CY, n)
    A, B = source[cell_y], cell_y
    v = coarse.v[B] - 2.0 * np.sum((Y - mY[B]) * (mX[A] - mY[B]), axis=1)
    kk = min(neighbours, mY.shape[0])
    _, near = cKDTree(mY).query(mY[match], k=kk, workers=_query_workers(len(match), workers))
    near = np.asarray(near, dtype=np.int64).reshape(len(match), kk)
    lists = [np.ascontiguousarray(CY[near].reshape(len(match), -1)[_cell_of(CX, n)])]
    start = _paired_cells(X, Y, CX, CY, match, _PERMS4)
    kind = "cells"
    if np.sum((X - Y) ** 2) < np.sum((X - Y[start]) ** 2):
        start, kind = np.arange(n, dtype=np.int64), "synchronous"
    summary = dict(
        n=mX.shape[0], rounds=coarse.rounds, certified=coarse.certified, pivots=coarse.stats.get("pivots", 0)
    )
    return _Guide(start=start, v=v, lists=lists, kind=kind, coarse=summary)


def _query_workers(n, workers):
    """Threads for a KD-tree query: one below ``THREADED_QUERY_MIN`` points (starting threads costs more)."""
    return 1 if n < THREADED_QUERY_MIN else workers


def candidate_neighbours(X, Y, k: int, k_sync: int, workers: int = -1) -> tuple[list[np.ndarray], float]:
    """Neighbour lists (N, ·) of the candidate set, −1 for none: the k nearest y's of each x_i and
    the k_sync nearest y's of y_i (the neighbourhood of the synchronous partner); and the separation
    of the clouds, median_i dist(x_i, Y) / median_j dist(y_j, Y∖{y_j}) (0 for identical clouds,
    ≈ 1 or less when each token's partner is among its nearest neighbours, 10²–10⁹ once the clouds
    are clusters on different eigenspaces)."""
    n = X.shape[0]
    workers = _query_workers(n, workers)
    tree = cKDTree(Y)
    lists = []
    d_xy, i_xy = tree.query(X, k=max(1, min(k, n)), workers=workers)
    d_yy, i_yy = tree.query(Y, k=max(2, min(k_sync, n)) if n > 1 else 1, workers=workers)
    for idx, kk in ((i_xy, k), (i_yy, k_sync)):
        kk = min(kk, n)
        if kk > 0:
            idx = np.asarray(idx, dtype=np.int64).reshape(n, -1)[:, :kk].copy()
            idx[idx >= n] = -1
            lists.append(np.ascontiguousarray(idx))
    if not lists:
        lists.append(np.full((n, 1), -1, dtype=np.int64))
    far = float(np.median(np.asarray(d_xy).reshape(n, -1)[:, 0]))
    spacing = float(np.median(np.asarray(d_yy).reshape(n, -1)[:, 1])) if n > 1 else 0.0
    separation = far / spacing if spacing > 0 else (0.0 if far == 0 else np.inf)
    return lists, separation


def lifted_neighbours(P, w, Q, k: int, workers: int = -1) -> np.ndarray:
    """For every q in Q the k points p of P with the smallest |p − q|² − w_p, shape (len(Q), k).

    A nearest-neighbour query in one more dimension (a power diagram): with p̂ = (p, sqrt(W − w_p)),
    W = max w, and q̂ = (q, 0), |p̂ − q̂|² = |p − q|² − w_p + W. Used with the current potentials, it
    proposes the columns j minimising c_ij − v_j, where the optimal partner of row i lies.
    """
    k = min(k, P.shape[0])
    lift = np.sqrt(np.maximum(np.max(w) - w, 0.0))
    _, idx = cKDTree(np.column_stack([P, lift])).query(
        np.column_stack([Q, np.zeros(len(Q))]), k=k, workers=_query_workers(len(Q), workers)
    )
    return np.ascontiguousarray(np.asarray(idx, dtype=np.int64).reshape(len(Q), k))


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


# ----------------------------------------------------------------------------- the solver


def rank_pairs(X, Y) -> np.ndarray:
    """Row i's partner in the lexicographic ranks of the two clouds, shape (N, 1): token of rank r in X ↔ token
    of rank r in Y. When Y holds the tokens of X in another order (duplicates included) this is an optimal
    assignment of cost 0, which nearest-neighbour lists miss: a query point with many exact copies gets the
    same few of them as every other copy (ties broken alike)."""
    rx = np.lexsort(X.T[::-1])
    ry = np.lexsort(Y.T[::-1])
    out = np.empty((X.shape[0], 1), dtype=np.int64)
    out[rx, 0] = ry
    return out


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


#: clouds whose largest |coordinate| lies outside [2^-SCALE_EXPONENT, 2^SCALE_EXPONENT] are solved rescaled
SCALE_EXPONENT = 64


def as_cloud(A, name: str) -> np.ndarray:
    """A finite real (N, d) float64 array, or a ValueError/TypeError naming the problem (before any work)."""
    if isinstance(A, np.ma.MaskedArray):
        raise TypeError(f"{name} is a masked array: drop the masked tokens first (W2 would ignore the mask)")
    arr = np.asarray(A)
    if np.iscomplexobj(arr):
        raise TypeError(f"{name} is complex ({arr.dtype}): W2 is defined here for real coordinates only")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (N, d), got {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}): W2 needs at least one token in d ≥ 1")
    out = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} has non-finite coordinates")
    if arr.dtype != np.float64 and arr.dtype.kind in "iuf" and not np.array_equal(out.astype(arr.dtype), arr):
        raise ValueError(f"{name} ({arr.dtype}) has coordinates that float64 does not hold exactly")
    return out


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
    Xs, Ys = np.ldexp(X, e), np.ldexp(Y, e)
    if not (np.array_equal(np.ldexp(Xs, -e), X) and np.array_equal(np.ldexp(Ys, -e), Y)):
        raise ValueError(
            f"the coordinates span more than float64 can hold at one scale (largest "
            f"{max(np.max(np.abs(X)), np.max(np.abs(Y))):.3g}, some underflow once rescaled)"
        )
    if warm is not None:
        raise ValueError(
            "a warm start needs clouds within the unscaled range (largest |coordinate| in "
            f"[2^-{SCALE_EXPONENT}, 2^{SCALE_EXPONENT}])"
        )
    if tol is not None:
        opts["tol"] = float(np.ldexp(float(tol), 2 * e))
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


#: w2_exact's integer options and their smallest values
_INTEGER_OPTIONS = dict(k=0, k_sync=0, k_dual=0, cell_neighbours=1, max_rounds=1, per_row=1, dense_max=0, dense_base=1)


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


def _meets(bound: _Bound, target: float) -> bool:
    """Certified: the error bound reaches the target and is below W2² itself (or W2² = 0 exactly, bound 0)."""
    eb = bound.error_bound
    return eb <= target and (eb < bound.value_sq or eb == 0.0)


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
            g = _multiscale_guide(X, Y, opts["cell_neighbours"], opts["workers"], coarse_kw)
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
