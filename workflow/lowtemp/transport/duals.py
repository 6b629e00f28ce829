"""Shortest-path dual potentials of an assignment on a sparse arc set, for the local re-solve of ``assignment``.

Where W2² is far below the costs between clusters, the simplex's spanning tree climbs through arcs of cost
O(1) and leaves potentials whose last digits are the whole of c_ij − v_j inside a cluster, and the certificate
(``pricing``) can only bound rounding. The shortest-path distances of the assignment's residual graph
(``_shortest_path_potentials``, label-correcting) are potentials of the size of the costs near the assignment
instead; a negative cycle met on the way is cancelled in the assignment (``_cancel_cycle``) and the search
starts again (``_local_duals``). ``assignment._with_local_duals`` re-solves on the cheap arcs and certifies
with them.
"""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np

from .pricing import _U
from .simplex import SparseAssignment

#: the arcs (i, j) of a sparse network, CSR by row: row i's columns cols[indptr[i]:indptr[i + 1]], their costs
_Arcs = namedtuple("_Arcs", "indptr cols costs")
#: the labels of the shortest-path search, one slot per row or column: distances and predecessors (−1: none)
_Labels = namedtuple("_Labels", "d_row d_col pred_row pred_col")


@numba.njit(cache=True)
def _shortest_path_potentials(arcs, perm, max_scans, labels):
    """Potentials of the assignment ``perm`` on the arcs (``_Arcs``, CSR by row) as shortest-path distances
    (into ``labels``, a ``_Labels``).

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
    indptr, cols, costs = arcs
    d_row, d_col, pred_row, pred_col = labels
    n = indptr.shape[0] - 1
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
                    if length[n + j] > nodes and _cancel_cycle(n, n + j, perm, labels):
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
                if length[i] > nodes and _cancel_cycle(n, i, perm, labels):
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
def _cancel_cycle(n, start, perm, labels):
    """Walk the predecessors (``labels``, a ``_Labels``) from ``start`` (a row < n or a column n + j); if they
    close a cycle, give every row on it the column it reaches on the cycle and return True (a label path longer
    than the number of nodes need not be a cycle any more: its predecessors may have moved since)."""
    pred_row, pred_col = labels.pred_row, labels.pred_col
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
    arcs = _Arcs(indptr, np.ascontiguousarray(cols[order]), np.ascontiguousarray(costs[order]))
    perm = perm.copy()
    labels = _Labels(np.empty(n), np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64))
    budget, changed = int(max_scans), False
    while budget > 0:
        status, scans = _shortest_path_potentials(arcs, perm, budget, labels)
        budget -= scans
        if status == 0:
            return perm, labels.d_col.copy(), changed
        if status == 2:
            return None
        changed = True
    return None
