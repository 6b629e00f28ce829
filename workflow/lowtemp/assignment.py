"""Exact W2 between two equal-size uniform clouds as a certified sparse assignment.

With uniform weights 1/N on both sides, optimal transport for the cost
c_ij = |x_i − y_j|² is an assignment problem (Birkhoff): W2² = min_π (1/N) Σ_i c_{i,π(i)}.
For the pipeline's clouds (two clouds of the same tokens, evolved with and without
temperature) the optimal π pairs every token with a nearby one, so it is solved on
a sparse candidate set and then certified on all N² pairs:

1. Candidates. Row i gets the k nearest y's of x_i, the ``k_sync`` nearest y's of
   y_i (the neighbourhood of its synchronous partner) and the synchronous pair
   (i, i) itself, which guarantees a perfect matching in the candidate graph.
   Memory O(N·k).
2. Sparse shortest augmenting paths (Jonker–Volgenant with Dijkstra on reduced
   costs, column potentials v, row potentials u_i = c_{i,π(i)} − v_{π(i)}), after a
   greedy start (every row takes its cheapest column if that column is free).
   Every augmentation touches only the columns its Dijkstra search scanned.
3. Certificate. (u, v) is dual feasible on the candidates and tight on π. A streamed
   numba pass over all N² pairs (parallel over rows, O(N) extra memory) checks
   c_ij − u_i − v_j ≥ −tol. Then for every assignment σ,
   Σ c_{iσ(i)} ≥ Σ u_i + Σ v_j − N·tol = Σ c_{iπ(i)} − N·tol − slack, i.e. π is optimal
   up to ``tol`` in W2² (``W2Result.gap_bound``).
4. Shielding loop. Pairs that violate the certificate join the candidate set, the
   rows they start from are unassigned (this keeps (u, v) feasible on the grown set)
   and re-augmented; after ``max_rounds`` failed certificates, POT's network simplex
   (``ot.emd2`` on the dense matrix, or ``ot.emd2_lazy`` above ``dense_max`` tokens)
   gives the answer.

Everything is sequential except the kNN queries and the certificate (parallel over
rows, each row writing its own output slots), so the same input gives the same bits.
numba kernels are compiled in every process (no on-disk cache).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np
import ot
from scipy.spatial import cKDTree

#: default absolute tolerance of the certificate on reduced costs (costs are ≤ 4 on the sphere)
DEFAULT_TOL = 1e-12
#: w2_exact's default tolerance: REL_TOL·W2² of the assignment, at least ROUNDING_TOL·max(|u|, |v|, c)
REL_TOL = 1e-11
ROUNDING_TOL = 1e-14
#: tolerance of the certificate of POT's duals after a fallback: max(FALLBACK_TOL, FALLBACK_TOL_PER_TOKEN·N).
#: POT's duals are exact up to errors that grow with N (its simplex accumulates potentials along tree
#: paths): measured 4e-13 (dense, N = 4096), 2.9e-12 (lazy, 4096) and 1.45e-11 (lazy, 16 384).
FALLBACK_TOL = 1e-11
FALLBACK_TOL_PER_TOKEN = 2e-15
#: the fallback builds the dense N×N matrix (ot.emd) up to this many tokens (2.6 GB peak at 8192),
#: else ot.emd2_lazy (costs computed on the fly, O(N) memory)
DENSE_MAX = 8192
#: above this separation ratio (``separation_ratio``) the candidates come from matched cells
#: (``cell_candidates``). With nearest-neighbour candidates alone, the sparse solve certified every
#: snapshot of the default run with a ratio up to 11 and gave up on every one above 36 (clouds far
#: apart compared with their own spacing: nearest neighbours say nothing about the plan); below 2
#: they are faster than the cells (10–35× emd2 against 4–8×).
CELL_SEPARATION = 2.0
#: tokens per cell of the cell-matched candidates, and how many Y cells (nearest to the matched one)
#: give their tokens to every row of a cell: measured best of (2, 8), (4, 4), (8, 3) on the default run
CELL_SIZE = 4
CELL_NEIGHBOURS = 4
#: nearest y's of x_i kept as candidates beside the matched cells' tokens
CELL_K = 8
#: coarse problems of at most this many cells go to POT directly, larger ones to ``w2_exact`` again
COARSE_DIRECT_MAX = 1024
EXTEND = 'ctransform'
ARR_PASSES = 2


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

    perm: the optimal assignment, token i of X ↔ token perm[i] of Y.
    u, v: dual potentials, c_ij − u_i − v_j ≥ −tol for all pairs, = 0 on perm (when certified).
    rounds: number of certificate passes; fallback: POT's network simplex gave the value.
    gap_bound: certified bound on (W2² of perm) − (optimal W2²): tol + mean slack.
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


# ----------------------------------------------------------------------------- numba kernels

@numba.njit(cache=False)
def _sqdist(X, Y, i, j):
    s = 0.0
    for a in range(X.shape[1]):
        t = X[i, a] - Y[j, a]
        s += t * t
    return s


@numba.njit(cache=False)
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


@numba.njit(cache=False)
def _greedy_start(indptr, cols, costs, v, col_of, row_of, acost):
    """Every row takes its cheapest column under c − v if that column is free; returns the free rows."""
    n = indptr.shape[0] - 1
    free = np.empty(n, dtype=np.int64)
    nfree = 0
    for i in range(n):
        best = np.inf
        bj = -1
        be = -1
        for e in range(indptr[i], indptr[i + 1]):
            r = costs[e] - v[cols[e]]
            if r < best:
                best = r
                bj = cols[e]
                be = e
        if row_of[bj] < 0:
            row_of[bj] = i
            col_of[i] = bj
            acost[i] = costs[be]
        else:
            free[nfree] = i
            nfree += 1
    return free[:nfree]


@numba.njit(cache=False)
def _row_reduction(indptr, cols, costs, free_rows, v, col_of, row_of, acost, max_steps):
    """Jonker–Volgenant augmenting row reduction (auction-like), one pass over the free rows.

    A free row takes its best column j1 (under c − v), lowering v_j1 until j1 ties with its
    second best; the evicted owner is processed next. Keeps assigned rows on their best column.
    Returns the rows still free (at most ``max_steps`` steps, so ties cannot cycle forever).
    """
    n = indptr.shape[0] - 1
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for t in range(free_rows.shape[0] - 1, -1, -1):
        stack[top] = free_rows[t]
        top += 1
    left = np.empty(n, dtype=np.int64)
    nleft = 0
    steps = 0
    while top > 0:
        top -= 1
        i = stack[top]
        steps += 1
        if steps > max_steps:
            left[nleft] = i
            nleft += 1
            continue
        u1 = np.inf
        u2 = np.inf
        j1 = -1
        j2 = -1
        e1 = -1
        e2 = -1
        for e in range(indptr[i], indptr[i + 1]):
            r = costs[e] - v[cols[e]]
            if r < u2:
                if r < u1:
                    u2 = u1
                    j2 = j1
                    e2 = e1
                    u1 = r
                    j1 = cols[e]
                    e1 = e
                else:
                    u2 = r
                    j2 = cols[e]
                    e2 = e
        if j2 < 0:
            left[nleft] = i
            nleft += 1
            continue
        i0 = row_of[j1]
        if u1 < u2:
            v[j1] -= u2 - u1
        elif i0 >= 0:
            j1 = j2
            e1 = e2
            i0 = row_of[j1]
        row_of[j1] = i
        col_of[i] = j1
        acost[i] = costs[e1]
        if i0 >= 0:
            col_of[i0] = -1
            if u1 < u2:
                stack[top] = i0
                top += 1
            else:
                left[nleft] = i0
                nleft += 1
    return left[:nleft].copy()


@numba.njit(cache=False)
def _heap_push(hk, hv, size, key, val):
    pos = size
    hk[pos] = key
    hv[pos] = val
    while pos > 0:
        parent = (pos - 1) >> 1
        if hk[parent] > hk[pos] or (hk[parent] == hk[pos] and hv[parent] > hv[pos]):
            hk[parent], hk[pos] = hk[pos], hk[parent]
            hv[parent], hv[pos] = hv[pos], hv[parent]
            pos = parent
        else:
            break
    return size + 1


@numba.njit(cache=False)
def _heap_pop(hk, hv, size):
    key = hk[0]
    val = hv[0]
    size -= 1
    hk[0] = hk[size]
    hv[0] = hv[size]
    pos = 0
    while True:
        left = 2 * pos + 1
        if left >= size:
            break
        child = left
        right = left + 1
        if right < size and (hk[right] < hk[left] or (hk[right] == hk[left] and hv[right] < hv[left])):
            child = right
        if hk[child] < hk[pos] or (hk[child] == hk[pos] and hv[child] < hv[pos]):
            hk[child], hk[pos] = hk[pos], hk[child]
            hv[child], hv[pos] = hv[pos], hv[child]
            pos = child
        else:
            break
    return key, val, size


@numba.njit(cache=False, inline="always")
def _relax_row(i, h, indptr, cols, costs, v, scanned, dist, pred, pcost, touched, ntouched, hk, hv, size):
    """Dijkstra relaxation of row i's candidate columns at offset h (= d_j − u_i of the column that reached i;
    0 for the free row the search starts from): reduced path length h + c_ij − v_j. Returns (ntouched, size)."""
    for e in range(indptr[i], indptr[i + 1]):
        j = cols[e]
        if scanned[j]:
            continue
        nd = h + costs[e] - v[j]
        if nd < dist[j]:
            if dist[j] == np.inf:
                touched[ntouched] = j
                ntouched += 1
            dist[j] = nd
            pred[j] = i
            pcost[j] = costs[e]
            size = _heap_push(hk, hv, size, nd, j)
    return ntouched, size


@numba.njit(cache=False)
def _augment_all(indptr, cols, costs, free_rows, v, col_of, row_of, acost):
    """Shortest augmenting path (Dijkstra on reduced costs) from every free row, in order.

    Invariant: c_ij − v_j ≥ c_{iπ(i)} − v_{π(i)} on every candidate edge of an assigned row.
    Returns (number of scanned columns in total, the largest search), or (−1, row) if a row
    cannot be matched (impossible when the synchronous pairs are candidates).
    """
    n = indptr.shape[0] - 1
    nnz = cols.shape[0]
    dist = np.full(n, np.inf)
    scanned = np.zeros(n, dtype=np.bool_)
    pred = np.full(n, -1, dtype=np.int64)
    pcost = np.zeros(n)
    touched = np.empty(n, dtype=np.int64)
    done = np.empty(n, dtype=np.int64)
    hk = np.empty(nnz + n, dtype=np.float64)
    hv = np.empty(nnz + n, dtype=np.int64)
    total_scanned = 0
    largest = 0
    for s in free_rows:
        ntouched = 0
        ndone = 0
        size = 0
        ntouched, size = _relax_row(s, 0.0, indptr, cols, costs, v, scanned, dist, pred, pcost, touched, ntouched,
                                    hk, hv, size)
        sink = -1
        mu = 0.0
        while size > 0:
            d, j, size = _heap_pop(hk, hv, size)
            if scanned[j] or d > dist[j]:
                continue
            scanned[j] = True
            done[ndone] = j
            ndone += 1
            i = row_of[j]
            if i < 0:
                sink = j
                mu = d
                break
            h = d - (acost[i] - v[j])  # d_j − u_i
            ntouched, size = _relax_row(i, h, indptr, cols, costs, v, scanned, dist, pred, pcost, touched,
                                        ntouched, hk, hv, size)
        if sink < 0:
            return -1, s
        total_scanned += ndone
        if ndone > largest:
            largest = ndone
        for t in range(ndone):
            j = done[t]
            v[j] += dist[j] - mu
        j = sink
        while True:
            i = pred[j]
            c = pcost[j]
            row_of[j] = i
            old = col_of[i]
            col_of[i] = j
            acost[i] = c
            if i == s:
                break
            j = old
        for t in range(ntouched):
            j = touched[t]
            dist[j] = np.inf
            scanned[j] = False
            pred[j] = -1
    return total_scanned, largest


@numba.njit(cache=False, inline="always")
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


@numba.njit(parallel=True, cache=False)
def _certify_kernel(X, Y, perm, u, v, tol, per_row, worst_j, worst_r, counts, rowmin, slack):
    """Reduced costs of all pairs, streamed by rows: count, min and the ``per_row`` worst violators per row."""
    n = X.shape[0]
    d = X.shape[1]
    for i in numba.prange(n):
        ui = u[i]
        m = np.inf
        cnt = 0
        nkeep = 0
        if d == 3:
            x0 = X[i, 0]
            x1 = X[i, 1]
            x2 = X[i, 2]
            for j in range(n):
                t0 = x0 - Y[j, 0]
                t1 = x1 - Y[j, 1]
                t2 = x2 - Y[j, 2]
                r = (t0 * t0 + t1 * t1 + t2 * t2 - ui) - v[j]
                m = min(m, r)
                if r < -tol:
                    cnt += 1
                    nkeep = _keep_most_negative(worst_r[i], worst_j[i], nkeep, r, j)
        else:
            for j in range(n):
                s = 0.0
                for a in range(d):
                    t = X[i, a] - Y[j, a]
                    s += t * t
                r = (s - ui) - v[j]
                m = min(m, r)
                if r < -tol:
                    cnt += 1
                    nkeep = _keep_most_negative(worst_r[i], worst_j[i], nkeep, r, j)
        counts[i] = cnt
        rowmin[i] = m
        j = perm[i]
        slack[i] = abs((_sqdist(X, Y, i, j) - ui) - v[j])


def _as_cloud(A, name):
    A = np.ascontiguousarray(A, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"{name} must have shape (N, d), got {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} has non-finite coordinates")
    return A


def certify(X, Y, perm, u, v, tol: float = DEFAULT_TOL, *, per_row: int = 8,
            max_pairs: int = 1_000_000) -> Certificate:
    """Check the optimality of the assignment ``perm`` for the cost |x_i − y_j|² with duals (u, v).

    Streams over all N² pairs (numba, parallel over rows; N² numbers are never stored):
    dual feasibility c_ij − u_i − v_j ≥ −tol for all i, j, complementary slackness
    |c_{i,perm(i)} − u_i − v_{perm(i)}| ≤ tol for all i, and that perm is a permutation.
    Extra memory O(N·per_row). Returns a :class:`Certificate` whose ``pairs`` holds at most
    ``per_row`` violating pairs per row (the most negative) and ``max_pairs`` in total,
    rows in increasing order.
    """
    X = _as_cloud(X, "X")
    Y = _as_cloud(Y, "Y")
    n = X.shape[0]
    if Y.shape != X.shape:
        raise ValueError(f"X and Y must have the same shape, got {X.shape} and {Y.shape}")
    perm = np.ascontiguousarray(perm, dtype=np.int64)
    u = np.ascontiguousarray(u, dtype=np.float64)
    v = np.ascontiguousarray(v, dtype=np.float64)
    is_perm = perm.shape == (n,) and bool(np.all((perm >= 0) & (perm < n))) and \
        np.unique(perm).size == n
    per_row = max(1, int(per_row))
    worst_j = np.full((n, per_row), -1, dtype=np.int64)
    worst_r = np.zeros((n, per_row))
    counts = np.zeros(n, dtype=np.int64)
    rowmin = np.empty(n)
    slack = np.empty(n)
    _certify_kernel(X, Y, np.clip(perm, 0, n - 1) if perm.shape == (n,) else np.zeros(n, np.int64),
                    u, v, float(tol), per_row, worst_j, worst_r, counts, rowmin, slack)
    kept = np.minimum(counts, per_row)
    rows = np.repeat(np.arange(n), kept)
    cols = worst_j[np.arange(per_row)[None, :] < kept[:, None]]
    pairs = np.stack([rows, cols], axis=1)[:max_pairs]
    n_viol = int(counts.sum())
    max_slack = float(slack.max()) if n else 0.0
    ok = is_perm and n_viol == 0 and max_slack <= tol
    return Certificate(ok=bool(ok), pairs=pairs, n_violations=n_viol,
                       min_reduced=float(rowmin.min()) if n else 0.0, max_slack=max_slack,
                       is_permutation=bool(is_perm))


# ----------------------------------------------------------------------------- the solver

def separation_ratio(X, Y, workers: int = -1) -> float:
    """median_i dist(x_i, Y) / median_j dist(y_j, Y∖{y_j}): how far the clouds are apart in units of Y's own spacing.

    About 1 or less for the pipeline's clouds before the departure (each token's partner is among its
    nearest neighbours); 10³–10⁹ after it, when the clouds are clusters on different eigenspaces.
    """
    tree = cKDTree(Y)
    across, _ = tree.query(X, k=1, workers=workers)
    within, _ = tree.query(Y, k=2, workers=workers)
    spacing = float(np.median(within[:, 1]))
    far = float(np.median(across))
    if spacing > 0:
        return far / spacing
    return 0.0 if far == 0 else np.inf


def balanced_cells(P, size: int) -> np.ndarray:
    """Cells of at most ``size`` points of P (N, d): halve at the median of the widest coordinate
    until a cell has ≤ size points. Returns an (m, size) index array, −1 padding the smaller cells;
    for N = size·2^L every cell has exactly ``size`` points."""
    leaves = []
    stack = [np.arange(P.shape[0])]
    while stack:
        idx = stack.pop()
        if idx.size <= size:
            leaves.append(idx)
            continue
        Q = P[idx]
        axis = int(np.argmax(Q.max(axis=0) - Q.min(axis=0)))
        half = idx.size // 2
        order = np.argpartition(Q[:, axis], half, kind="introselect")
        stack.append(idx[order[half:]])
        stack.append(idx[order[:half]])
    cells = np.full((len(leaves), size), -1, dtype=np.int64)
    for c, idx in enumerate(leaves):
        cells[c, :idx.size] = idx
    return cells


def _centroids(P, cells):
    counts = np.sum(cells >= 0, axis=1)
    sums = np.zeros((cells.shape[0], P.shape[1]))
    for t in range(cells.shape[1]):
        ok = cells[:, t] >= 0
        sums[ok] += P[cells[ok, t]]
    return sums / counts[:, None], counts


def _coarse_plan(mX, mY, nX, nY, dense_max, workers):
    """Matched cells (row cell → Y cell, Y cell → row cell) and the Y cells' potentials of the
    transport between the cells' centroids with the cells' masses; None if it is too large for POT."""
    m = mX.shape[0]
    if m > COARSE_DIRECT_MAX and np.all(nX == nX[0]) and np.all(nY == nX[0]) and mY.shape[0] == m:
        res = w2_exact(mX, mY, dense_max=dense_max, workers=workers)  # equal cells: an assignment again
        return res.perm, np.argsort(res.perm), res.v
    if max(m, mY.shape[0]) > dense_max:
        return None
    C = np.empty((m, mY.shape[0]))
    _dense_cost(mX, mY, C)
    G, log = ot.emd(nX / nX.sum(), nY / nY.sum(), C, numItermax=max(100_000, 100 * C.size), log=True)
    if log["result_code"] != 1:
        return None
    return np.argmax(G, axis=1), np.argmax(G, axis=0), np.asarray(log["v"], float)


def cell_candidates(X, Y, *, size: int = CELL_SIZE, neighbours: int = CELL_NEIGHBOURS,
                    dense_max: int = DENSE_MAX, workers: int = -1):
    """Candidates and starting column potentials for clouds far apart (clusters after the departure).

    Both clouds are cut into balanced cells of ``size`` tokens (``balanced_cells``); the transport
    between the cells' centroids (masses = token counts) matches every cell of X with a cell of Y.
    Row i gets the tokens of the ``neighbours`` Y cells nearest to its cell's match. The column
    potentials extend the coarse ones to first order: for y_j in cell B matched from cell A,
    v_j = V_B − 2⟨y_j − m_B, m_A − m_B⟩, the separable part of |x − y|² around the pair of
    centroids (m_A, m_B), so that c_ij − v_j varies inside a matched pair only through the
    shapes of the two cells. Returns (neighbour list (N, neighbours·size), v), or None when the
    coarse problem is too large for the network simplex and its cells are unequal.
    """
    n = X.shape[0]
    CX, CY = balanced_cells(X, size), balanced_cells(Y, size)
    (mX, nX), (mY, nY) = _centroids(X, CX), _centroids(Y, CY)
    plan = _coarse_plan(mX, mY, nX, nY, dense_max, workers)
    if plan is None:
        return None
    match, source, V = plan
    cell_x = np.empty(n, dtype=np.int64)
    cell_y = np.empty(n, dtype=np.int64)
    cell_x[CX[CX >= 0]] = np.nonzero(CX >= 0)[0]
    cell_y[CY[CY >= 0]] = np.nonzero(CY >= 0)[0]
    B = cell_y
    A = source[B]
    v = V[B] - 2.0 * np.sum((Y - mY[B]) * (mX[A] - mY[B]), axis=1)
    k = min(neighbours, mY.shape[0])
    _, near = cKDTree(mY).query(mY[match], k=k, workers=workers)
    near = np.asarray(near, dtype=np.int64).reshape(len(match), k)
    lists = CY[near].reshape(len(match), -1)[cell_x]
    return np.ascontiguousarray(lists), v


def candidate_neighbours(X, Y, k: int, k_sync: int, k_own: int = 0, workers: int = -1) -> list[np.ndarray]:
    """Neighbour lists (N, ·) of the candidate set, −1 for none.

    The k nearest y's of each x_i, the k_sync nearest y's of y_i, and the synchronous partners
    j of the k_own nearest x_j of x_i (scale-free: it follows the token labels, not the distances).
    """
    n = X.shape[0]
    lists = []
    for ref, pts, kk in ((Y, X, k), (Y, Y, k_sync), (X, X, k_own)):
        kk = min(kk, n)
        if kk > 0:
            _, idx = cKDTree(ref).query(pts, k=kk, workers=workers)
            idx = np.asarray(idx, dtype=np.int64).reshape(n, kk)
            idx[idx >= n] = -1
            lists.append(np.ascontiguousarray(idx))
    if not lists:
        lists.append(np.full((n, 1), -1, dtype=np.int64))
    return lists


def lifted_neighbours(P, w, Q, k: int, workers: int = -1) -> np.ndarray:
    """For every q in Q the k points p of P with the smallest |p − q|² − w_p, shape (len(Q), k).

    A nearest-neighbour query in one more dimension (a power diagram): with p̂ = (p, sqrt(W − w_p)),
    W = max w, and q̂ = (q, 0), |p̂ − q̂|² = |p − q|² − w_p + W. Used with the current potentials, it
    proposes the columns j minimising c_ij − v_j, where the optimal partner of row i lies.
    """
    k = min(k, P.shape[0])
    lift = np.sqrt(np.maximum(np.max(w) - w, 0.0))
    _, idx = cKDTree(np.column_stack([P, lift])).query(np.column_stack([Q, np.zeros(len(Q))]), k=k,
                                                     workers=workers)
    return np.ascontiguousarray(np.asarray(idx, dtype=np.int64).reshape(len(Q), k))


@numba.njit(cache=False)
def _c_transform(X, Y, u, nbrs):
    """v_j = min over the rows i in nbrs[j] of |x_i − y_j|² − u_i."""
    n = Y.shape[0]
    v = np.empty(n)
    for j in range(n):
        best = np.inf
        for t in range(nbrs.shape[1]):
            i = nbrs[j, t]
            r = _sqdist(X, Y, i, j) - u[i]
            if r < best:
                best = r
        v[j] = best
    return v


def _sparse_solve(X, Y, lists, v, extra_i=None, extra_j=None):
    """Greedy start and shortest augmenting paths on the candidate set; returns (col_of, v, acost, csr, stats)."""
    n = X.shape[0]
    no_extra = np.empty(0, dtype=np.int64)
    csr = _build_csr(X, Y, numba.typed.List(lists), no_extra if extra_i is None else extra_i,
                     no_extra if extra_j is None else extra_j)
    col_of = np.full(n, -1, dtype=np.int64)
    row_of = np.full(n, -1, dtype=np.int64)
    acost = np.zeros(n)
    v = v.copy()
    free = _greedy_start(*csr, v, col_of, row_of, acost)
    nfree0 = free.size
    for _ in range(ARR_PASSES):
        free = _row_reduction(*csr, free, v, col_of, row_of, acost, 4 * n)
    nfree1 = free.size
    scanned, largest = _augment_all(*csr, free, v, col_of, row_of, acost)
    if scanned < 0:  # cannot happen with (i, i) among the candidates
        raise RuntimeError(f"candidate graph has no perfect matching (row {largest})")
    return col_of, row_of, v, acost, csr, dict(free=int(nfree0), after_arr=int(nfree1), scanned=int(scanned), largest=int(largest))


def multiscale_potentials(X, Y, *, factor: int = 4, base: int = 1024, k: int = 8, k_sync: int = 4,
                          k_dual: int = 8, workers: int = -1) -> np.ndarray:
    """Column potentials v for X, Y from the assignment of the sub-clouds X[::factor], Y[::factor].

    The sub-clouds keep the same tokens on both sides (the synchronous structure), so they
    sample both measures; their potentials (solved the same way, recursively down to ``base``
    tokens, not certified) are extended to every column by the c-transform over the sub-rows.
    Any v is a valid start; a good one makes the augmenting paths short.
    """
    n = X.shape[0]
    if n <= base:
        return np.zeros(n)
    sub = np.arange(0, n, factor)
    Xs, Ys = X[sub], Y[sub]
    vs = multiscale_potentials(Xs, Ys, factor=factor, base=base, k=k, k_sync=k_sync, k_dual=k_dual,
                               workers=workers)
    lists = candidate_neighbours(Xs, Ys, k, k_sync, 0, workers)
    if np.any(vs != 0):
        lists.append(lifted_neighbours(Ys, vs, Xs, k_dual, workers))
    col_of, _, vs, acost, _, _ = _sparse_solve(Xs, Ys, lists, vs)
    if EXTEND == "ctransform":
        us = acost - vs[col_of]
        nbrs = lifted_neighbours(Xs, us, Y, 4, workers)
        return _c_transform(Xs, Y, us, nbrs)
    # interpolate: mean of the potentials of the 4 nearest sub-columns
    _, idx = cKDTree(Ys).query(Y, k=4, workers=workers)
    return np.mean(vs[idx], axis=1)


@numba.njit(parallel=True, cache=False)
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


def w2_exact(X, Y, *, k: int = 16, k_sync: int = 8, k_own: int = 0, k_dual: int = 8, warm=None,
             multiscale: bool = False, precheck: bool = True, tol: float | None = None,
             max_rounds: int = 6, per_row: int = 8,
             dense_max: int = DENSE_MAX, separation_max: float = np.inf,
             cell_separation: float = CELL_SEPARATION, workers: int = -1) -> W2Result:
    """Exact W2 (Euclidean cost in R^d, uniform weights 1/N) between the clouds X and Y, both (N, d).

    Sparse shortest-augmenting-path assignment on the candidate set (k nearest y's of
    x_i, k_sync nearest y's of y_i, the partners of the k_own nearest x's of x_i, (i, i),
    and the k_dual columns minimising c_ij − v_j for the starting potentials v), certified
    on all N² pairs by :func:`certify`; violating pairs are added and the assignment
    repaired, up to ``max_rounds`` certificate passes, then POT's network simplex decides.
    Clouds further apart than ``cell_separation`` (:func:`separation_ratio`; without ``warm``) get
    the candidates and starting potentials of :func:`cell_candidates` instead of the synchronous
    ones; further apart than ``separation_max`` (default: never) they go to the network simplex
    directly, its answer certified the same way.

    Starting potentials: ``warm`` (a previous :class:`W2Result` or column potentials v,
    shape (N,)), else with ``multiscale`` those of :func:`multiscale_potentials`, else 0.
    Any v is valid; a close one makes augmenting paths short.
    Returns a :class:`W2Result`; ``value`` is W2 itself, sqrt((1/N) Σ_i |x_i − y_perm(i)|²).
    """
    X = _as_cloud(X, "X")
    Y = _as_cloud(Y, "Y")
    if X.shape != Y.shape:
        raise ValueError(f"w2_exact needs clouds of the same shape, got {X.shape} and {Y.shape}")
    n = X.shape[0]
    if n == 0:
        raise ValueError("empty clouds")
    separation = separation_ratio(X, Y, workers) if n > 1 else 0.0
    if separation > separation_max:
        return _certified_fallback(X, Y, dense_max, tol, per_row,
                                   dict(separation=separation, separation_gate=True, cells=False,
                                        greedy_free_rows=0, scanned_columns=0, largest_search=0, added_pairs=0,
                                        prechecks=0), rounds=0, n_candidates=0)
    cells = None
    if separation > cell_separation and warm is None:
        cells = cell_candidates(X, Y, dense_max=dense_max, workers=workers)
    if cells is not None:
        v = cells[1]
    elif warm is not None:
        v = np.array(warm.v if isinstance(warm, W2Result) else warm, dtype=np.float64)
        if v.shape != (n,) or not np.all(np.isfinite(v)):
            raise ValueError("warm potentials must be finite with shape (N,)")
    elif multiscale:
        v = multiscale_potentials(X, Y, k=k, k_sync=k_sync, k_dual=k_dual, workers=workers)
    else:
        v = np.zeros(n)
    if cells is None:
        lists = candidate_neighbours(X, Y, k, k_sync, k_own, workers)
    else:  # far apart: the synchronous partner's neighbourhood says nothing; the matched cells do
        lists = candidate_neighbours(X, Y, CELL_K, 0, 0, workers) + [cells[0]]
    if k_dual > 0 and np.any(v != 0):
        lists.append(lifted_neighbours(Y, v, X, k_dual, workers))
    col_of, row_of, v, acost, (indptr, cols, costs), st = _sparse_solve(X, Y, lists, v)
    stats = dict(greedy_free_rows=st["free"], scanned_columns=st["scanned"], largest_search=st["largest"],
                 added_pairs=0)
    extra_i = extra_j = np.empty(0, dtype=np.int64)
    rounds = 0
    stats["prechecks"] = 0
    while True:
        u = acost - v[col_of]
        if tol is None:  # relative to W2², above the rounding of the reduced costs
            tol_r = max(REL_TOL * float(np.mean(acost)),
                        ROUNDING_TOL * max(float(np.max(np.abs(u))), float(np.max(np.abs(v))), float(np.max(acost))))
        else:
            tol_r = float(tol)
        tol_r = max(tol_r, 1e-300)
        # cheap pre-check (O(N log N)): the per_row columns minimising c_ij − v_j of every row
        if not precheck:
            nb = np.zeros((n, 1), dtype=np.int64)
        else:
            nb = lifted_neighbours(Y, v, X, per_row, workers)
        red = np.sum((X[:, None, :] - Y[nb]) ** 2, axis=-1) - u[:, None] - v[nb]
        bad = red < -tol_r
        if precheck and np.any(bad) and stats["prechecks"] < 2 * max_rounds:
            stats["prechecks"] += 1
            pairs = np.column_stack([np.nonzero(bad)[0], nb[bad]])
            if stats["prechecks"] >= 3 and np.count_nonzero(np.any(bad, axis=1)) > n // 4:
                cert = None  # the candidate set is far off (extreme degeneracy): network simplex is faster
                break
        else:
            cert = certify(X, Y, col_of, u, v, tol_r, per_row=per_row)
            rounds += 1
            if cert.ok or rounds >= max_rounds:
                break
            if rounds >= 2 and np.unique(cert.pairs[:, 0]).size > n // 4:
                break  # the candidate set is far off (extreme degeneracy): network simplex is faster
            pairs = cert.pairs
        # shielding: add the violating pairs, unassign their rows (restores feasibility) and repair
        extra_i = np.concatenate([extra_i, pairs[:, 0]])
        extra_j = np.concatenate([extra_j, pairs[:, 1]])
        indptr, cols, costs = _build_csr(X, Y, numba.typed.List(lists), extra_i, extra_j)
        free = np.unique(pairs[:, 0])
        if rounds and cert.max_slack > tol_r:  # not expected: repair every non-tight row too
            free = np.union1d(free, np.flatnonzero(np.abs(acost - u - v[col_of]) > tol_r))
        row_of[col_of[free]] = -1
        col_of[free] = -1
        scanned, largest = _augment_all(indptr, cols, costs, free, v, col_of, row_of, acost)
        if scanned < 0:
            raise RuntimeError(f"candidate graph has no perfect matching (row {largest})")
        stats["scanned_columns"] += int(scanned)
        stats["largest_search"] = max(stats["largest_search"], int(largest))
        stats["added_pairs"] += int(pairs.shape[0])
    stats["min_reduced"] = cert.min_reduced if cert is not None else np.nan
    stats.update(separation=separation, separation_gate=False, cells=cells is not None)
    if cert is None or not cert.ok:
        return _certified_fallback(X, Y, dense_max, tol_r, per_row, stats, rounds, int(cols.size))
    return _result(X, Y, col_of, u, v, cert, rounds, False, int(cols.size), stats)


def _result(X, Y, perm, u, v, cert, rounds, fallback, n_candidates, stats) -> W2Result:
    pair_costs = np.sum((X - Y[perm]) ** 2, axis=1)
    value = float(np.sqrt(max(float(np.sum(pair_costs)) / X.shape[0], 0.0)))
    gap = max(0.0, -cert.min_reduced) + cert.max_slack
    return W2Result(value=value, perm=perm, u=u, v=v, rounds=rounds, fallback=fallback, certified=cert.ok,
                    gap_bound=float(gap), n_candidates=n_candidates, stats=stats)


def _certified_fallback(X, Y, dense_max, tol, per_row, stats, rounds, n_candidates) -> W2Result:
    """POT's network simplex, its plan and duals certified on all pairs like the sparse solve's."""
    perm, u, v = _pot_fallback(X, Y, dense_max)
    if tol is None:
        tol = REL_TOL * float(np.mean(np.sum((X - Y[perm]) ** 2, axis=1)))
    # POT's duals carry errors of ~1e-13 (its simplex works to its own epsilon): certify them loosely
    cert = certify(X, Y, perm, u, v, max(float(tol), FALLBACK_TOL, FALLBACK_TOL_PER_TOKEN * X.shape[0]),
                   per_row=per_row)
    return _result(X, Y, perm, u, v, cert, rounds, True, n_candidates, stats)
