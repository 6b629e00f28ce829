"""Pricing and the certificate of the exact W2 solver (step 4 of ``assignment``): all N² pairs, streamed.

A numba pass over all N² pairs (parallel over rows, nothing of size N² stored: ``_price_kernel``) gives, for
column potentials v, the c-transform u*_i = min_j (c_ij − v_j), which makes (u*, v) dual feasible for the
whole problem by construction. Weak duality then bounds the error of the assignment π:
W2²(π) − W2²_opt ≤ (1/N) Σ_i (c_{iπ(i)} − v_{π(i)} − u*_i) (``_certificate``, the solver's ``gap_bound``),
every term bounded with the rounding of its own arithmetic (``_rounding_of``, ``_rounding_constants``), so the
bound holds for the exact costs of the given coordinates; its ``error_bound`` adds the rounding of W2²(π).
``_meets`` is the rule that certifies: the bound reaches its target and is below W2² itself (or both are 0).
The same pass returns, per row, the columns that beat the row's assignment (the solver's column generation).
``certify`` checks given duals (u, v) on all pairs. Every cost is a sum of squared coordinate differences,
summed coordinate by coordinate (``_sqdist``, ``_pair_costs``): the same arithmetic everywhere in the solver.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass

import numba
import numpy as np

#: default absolute tolerance of ``certify`` on reduced costs (costs are ≤ 4 on the sphere)
DEFAULT_TOL = 1e-12
#: unit roundoff of float64, and the cost below which a square of a coordinate difference may be subnormal
_U = 2.0**-53
_TINY = 2.0**-969
#: rows per task of the pricing kernel (each task holds three length-N buffers)
PRICE_ROWS_PER_TASK = 64

#: the rounding constants of ``_rounding_of`` (``_rounding_constants``): g·ĉ + e·|r̂|, plus uf where ĉ may have
#: underflowed
_Rounding = namedtuple("_Rounding", "g e uf")
#: the pricing kernel's thresholds: row i's is t_i − tol, t_i = r_{iπ(i)} if ``below_assigned`` else base_i
_Cut = namedtuple("_Cut", "base below_assigned tol")
#: the pricing kernel's outputs, one slot (or row) per row of X: its minima, assigned values and their rounding
#: bounds, and the pairs below the threshold (their count and the most negative, columns keep_j, values keep_r)
_PriceOut = namedtuple("_PriceOut", "rowmin assigned rowmin_lo assigned_hi counts keep_j keep_r")
#: one task's length-N work rows of the pricing kernel: ĉ_ij, r̂_ij and r̂_ij less its rounding bound
_RowBuffers = namedtuple("_RowBuffers", "sq red low")


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


@numba.njit(cache=True)
def _sqdist(X, Y, i, j):
    # |x_i − y_j|² by differences, coordinate by coordinate, as the pricing kernel. Called from the kernels of
    # neighbours, guide and assignment: numba's cache does not see a change here from those files (clear it).
    s = 0.0
    for a in range(X.shape[1]):
        t = X[i, a] - Y[j, a]
        s += t * t
    return s


def _pair_costs(X, Y, perm):
    """|x_i − y_perm(i)|², by differences summed coordinate by coordinate (as the pricing kernel); with X's
    rows of some pairs and ``perm`` their columns, the costs of those pairs."""
    D = X - Y[perm]
    out = D[:, 0] * D[:, 0]
    for a in range(1, X.shape[1]):
        out = out + D[:, a] * D[:, a]
    return out


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
def _rounding_of(s, r, rnd, underflow):
    """Bound on |r̂ − r| for r̂ = fl(ĉ − v_j), ĉ = fl(Σ_a fl(x_a − y_a)²): g·ĉ (the cost's own roundings)
    + e·|r̂| (the subtraction, and the one that applies this bound), plus the subnormal spacing uf when
    ĉ may have underflowed (``underflow``: some coordinate difference was not zero); rnd = (g, e, uf)."""
    b = rnd.g * s + rnd.e * abs(r)
    if underflow:
        b += rnd.uf
    return b


@numba.njit(cache=True)
def _price_row(i, X, YT, v, rnd, buf):
    """Row i's r_ij = fl(ĉ_ij − v_j) into ``buf.red`` and r_ij − (rounding bound, ``rnd``) into ``buf.low``, for
    every column j (``buf.sq``: the costs ĉ_ij).

    The squares are summed dimension by dimension over whole rows of Y (ĉ = fl(fl(t_0²) + fl(t_1²)) + …,
    the same sequence of roundings as a sum per pair), so that each loop is elementwise and the compiler
    vectorises it. Where ĉ is below ``_TINY`` and some difference is not zero, a square may have
    underflowed: those pairs' bounds get the subnormal term ``uf`` (``_rounding_of``)."""
    g, e = rnd.g, rnd.e
    sq, red, low = buf
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
                    low[j] = red[j] - _rounding_of(s, red[j], rnd, True)


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
def _price_kernel(X, YT, perm, v, cut, rnd, out):
    """All pairs, streamed by rows: r_ij = c_ij − v_j (c by differences, the same arithmetic everywhere).

    Per row, into ``out`` (a ``_PriceOut``): rowmin_i = min_j r_ij, assigned_i = r_{i,perm(i)}, and the pairs
    with r_ij < t_i − tol (``cut``, a ``_Cut``: t_i = assigned_i if ``below_assigned`` else base_i): their count
    and the ``keep_j.shape[1]`` smallest r_ij − t_i, kept sorted with their columns. A row's pairs are searched
    only if its minimum is below its threshold (after the first pricing passes, few rows are), from column i
    on, so rows that tie (duplicate tokens) keep different columns.
    With the rounding of every r̂_ij bounded (``_rounding_of``, constants ``rnd``): rowmin_lo_i ≤ the exact
    min_j r_ij and assigned_hi_i ≥ the exact r_{iπ(i)} (the rigorous certificate, ``_certificate``).
    Y is transposed (d, N) so that every pass reads it contiguously; rows go in tasks of
    ``PRICE_ROWS_PER_TASK``, each with its own buffers (rows write only their own slots: the same bits
    on any number of threads)."""
    base, below_assigned, tol = cut
    rowmin, assigned, rowmin_lo, assigned_hi, counts, keep_j, keep_r = out
    n = X.shape[0]
    d = X.shape[1]
    tasks = (n + PRICE_ROWS_PER_TASK - 1) // PRICE_ROWS_PER_TASK
    for task in numba.prange(tasks):
        sq = np.empty(n)
        red = np.empty(n)
        low = np.empty(n)
        buf = _RowBuffers(sq, red, low)
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
            assigned_hi[i] = a0 + _rounding_of(s0, a0, rnd, nz and s0 < _TINY)
            ref = a0 if below_assigned else base[i]
            cut_i = ref - tol
            _price_row(i, X, YT, v, rnd, buf)
            m, lo = _row_minima(red, low)
            rowmin[i] = m
            rowmin_lo[i] = lo
            cnt = 0
            if m < cut_i:
                nkeep = 0
                for jj in range(n):
                    j = jj + i
                    if j >= n:
                        j -= n
                    r = red[j]
                    if r < cut_i:
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
    """(g, e, uf) of ``_rounding_of`` for clouds in R^d, a ``_Rounding``.

    ĉ = fl(Σ_a fl(fl(x_a − y_a)²)) is Σ_a c_a(1 + θ_a), |θ_a| ≤ γ_{d+1} (one rounding in the difference,
    counted twice by the square, one in the square, d − 1 in the sum; γ_k = ku/(1 − ku), u = 2⁻⁵³), so
    |ĉ − c| ≤ γ_{d+1}/(1 − γ_{d+1})·ĉ; fl(ĉ − v) and the subtraction of the bound itself each add at most
    u·|r̂|(1 + O(u)). The constants round these up (d + 4 for d + 1, 3u for 2u) so that the O(u²) terms and
    the rounding of g·ĉ + e·|r̂| are covered. Below ĉ = ``_TINY`` a square may have lost up to half the
    subnormal spacing 2⁻¹⁰⁷⁴ (sums and differences of subnormals are exact): uf = d·2⁻¹⁰⁷⁴ more."""
    return _Rounding((d + 4) * _U, 3.0 * _U, d * 2.0**-1074)


def _price_all_pairs(X, Y, perm, v, tol, *, base=None, per_row=8, max_pairs=None) -> _Pricing:
    """Stream c_ij − v_j over all N² pairs (extra memory O(N·per_row)); thresholds base_i − tol, or
    (without ``base``) the row's assigned value − tol, i.e. the columns that beat the assignment."""
    n = X.shape[0]
    per_row = max(1, int(per_row))
    rowmin, assigned, rowmin_lo, assigned_hi = (np.empty(n) for _ in range(4))
    counts = np.zeros(n, dtype=np.int64)
    keep_j = np.full((n, per_row), -1, dtype=np.int64)
    out = _PriceOut(rowmin, assigned, rowmin_lo, assigned_hi, counts, keep_j, np.zeros((n, per_row)))
    below = base is None
    cut = _Cut(np.zeros(n) if below else np.ascontiguousarray(base, dtype=np.float64), below, float(tol))
    rnd = _Rounding(*(float(c) for c in _rounding_constants(X.shape[1])))
    _price_kernel(X, np.ascontiguousarray(Y.T), perm, np.ascontiguousarray(v, dtype=np.float64), cut, rnd, out)
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


def _meets(bound: _Bound, target: float) -> bool:
    """Certified: the error bound reaches the target and is below W2² itself (or W2² = 0 exactly, bound 0)."""
    eb = bound.error_bound
    return eb <= target and (eb < bound.value_sq or eb == 0.0)


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
