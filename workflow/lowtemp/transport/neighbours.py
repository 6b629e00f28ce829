"""The candidate pairs of the exact W2 solver (step 2 of ``assignment``), as neighbour lists and their CSR.

Besides the matched cells of the guide (``guide``), a row i's candidates are the k nearest y's of x_i and the
k_sync nearest y's of y_i (``candidate_neighbours``, which also measures how far apart the clouds are), the
``k_dual`` columns minimising c_ij − v_j under the starting potentials (``lifted_neighbours``: a power
diagram query), the starting assignment, (i, i) and the lexicographic rank pairs (``rank_pairs``: every exact
copy of a token gets its own partner). ``_build_csr`` merges the lists per row into the sparse network the
simplex solves on (O(N·k) memory), its costs by differences as everywhere in the solver.
"""

from __future__ import annotations

import numba
import numpy as np
from scipy.spatial import cKDTree

from .pricing import _sqdist

#: KD-tree queries of fewer points run on one thread
THREADED_QUERY_MIN = 16384


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
