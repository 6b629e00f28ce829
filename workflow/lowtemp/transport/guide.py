"""The multiscale guide of the exact W2 solver (step 1 of ``assignment``): balanced cells and their match.

Both clouds are cut into balanced cells of ``CELL_SIZE`` tokens (``balanced_cells``: median splits of the
widest coordinate), and the cells' centroids are matched by the solver itself (``assignment.w2_exact``, passed
in as ``coarse_solve``: this module does not import the driver), recursively down to ``DENSE_BASE`` points.
The match gives the fine level (``_multiscale_guide``) (a) a starting assignment: the tokens of matched cells
paired optimally inside each pair of cells (``_paired_cells``), or the synchronous pairing x_i ↔ y_i if that
costs less; (b) starting column potentials: the coarse ones extended to first order,
v_j = V_B − 2⟨y_j − m_B, m_A − m_B⟩ for y_j in cell B matched from cell A (the separable part of
|x − y|² around the two centroids); (c) candidates: the tokens of the ``CELL_NEIGHBOURS`` Y cells nearest
to a row's matched cell. Clouds far apart (after the departure) are exactly where nearest neighbours say
nothing about the plan and the matched cells do.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numba
import numpy as np
from scipy.spatial import cKDTree

from .neighbours import _query_workers
from .pricing import _sqdist

#: tokens per cell of the multiscale guide, and how many Y cells (nearest to the matched one) give
#: their tokens to every row of a cell (8 rather than 4 plus the lifted candidates of ``k_dual``: as
#: fast at N = 4096 on the default run's snapshots, 12 % faster at 16384, where the lifted query in
#: four dimensions costs 50x a plain nearest-neighbour query)
CELL_SIZE = 4
CELL_NEIGHBOURS = 8
#: the 24 orders of four tokens: matched cells of CELL_SIZE = 4 are paired by trying them all
_PERMS4 = np.array(list(itertools.permutations(range(4))), dtype=np.int64)


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


def _multiscale_guide(X, Y, neighbours, workers, coarse_solve) -> _Guide:
    """The guide of the module's docstring; ``coarse_solve(mX, mY)`` matches the cells' centroids (a
    :class:`assignment.W2Result`: its ``perm``, its column potentials ``v`` and its summary are used)."""
    n = X.shape[0]
    CX, CY = balanced_cells(X, CELL_SIZE), balanced_cells(Y, CELL_SIZE)
    (mX, _), (mY, _) = _centroids(X, CX), _centroids(Y, CY)
    coarse = coarse_solve(mX, mY)
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
