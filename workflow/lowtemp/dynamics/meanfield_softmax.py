"""The softmax averages of the one-dimensional mean-field reference (``meanfield``) and the edges' velocity.

The velocity at a query angle is the softmax average of V y over the cells' linear density reconstruction
(``meanfield_cells.density_slopes``), integrated over every cell to a relative accuracy ``QUADRATURE_RTOL`` in log
space (Gauss–Legendre, order per piece: ``meanfield_quadrature``): each cell's integral is scaled by its own
largest exponent, so a cell whose weight is e^{−500} of the largest is still resolved, and cells that cannot matter
(upper bound below e^{−PRUNE_DEPTH} of a proven lower bound of the total) are skipped, which makes the cost at large
β independent of how deep the density at the Laplace point lies. On S² the azimuthal integral is
2π I_ν(β b_p sin θ sin θ') (ν = 0, 1), evaluated scaled (``meanfield_quadrature.scaled_bessel``).

Pruning. For a query with score κ cos(ϑ' − α) (+ a Bessel factor on S²), cell k's contribution is bounded above by
e^{U_k}, U_k = base_k + κ·max_cell cos(ϑ' − α), base_k = log m̄_k + log(1 + |slope_k|) + log width_k with m̄_k the
cell's mean density. The cell with the largest bound is integrated first; its log-integral L is a lower bound of the
total, and every cell with U_k < L − PRUNE_DEPTH is skipped. Inside a cell that is kept, the part where
base_k + κ cos(ϑ' − α) < L − PRUNE_DEPTH is skipped too (its window, ``_window``): at large κ the kernel is far
narrower than a cell, and the integrand's derivative on the window is κ·max|sin(ϑ' − α)| there, not κ, so the window
needs far fewer nodes. Every skipped cell, and the skipped parts of a kept cell together, are at most
e^{L − PRUNE_DEPTH}: with M cells the skipped share of the total is below M·e^{−PRUNE_DEPTH}.

The numba kernels take their arrays and scalars grouped as namedtuples (``_Cells``, ``_Scores``, ``_Mode``,
``_Query``, ``_Cell``, ``_NodeTable``, and ``meanfield_quadrature.Rule``). They are cached on disk; numba's cache
of a kernel is keyed on its own file only, so a change to a kernel of ``meanfield_quadrature`` alone calls for
clearing the cache. Derivation and measured accuracy: docs/mean_field.md, "The softmax integrals, in log space".
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit, prange

from .meanfield_cells import cell_measure, density_slopes
from .meanfield_quadrature import RULE, SUB_HALF_VARIATION, _pick_order, _scaled_bessel01
from .reduction import Reduction

#: cells whose contribution is provably below e^{−PRUNE_DEPTH} of the total's lower bound are skipped;
#: the skipped mass is at most (cells)·e^{−40} ≈ 4e-18·cells of the total, far below QUADRATURE_RTOL
PRUNE_DEPTH = 40.0
#: the cells' node table (``_node_table``) is used up to this κ: its exponent κ(cos ϑ cos α + sin ϑ sin α − cmax)
#: has an absolute rounding error of about 2κε, 4.4e-13 here, below QUADRATURE_RTOL
TABLE_MAX_KAPPA = 1000.0
#: near the peak the exponent's slope κ·sin(ϑ' − α) vanishes but its curvature κ does not: e^{−κ r² u²/2} on a piece
#: of half-length r needs the order that e^{cu} needs at c = 3.05·r·√κ (their Chebyshev coefficients matched at the
#: 12-point rule; 1.86 at 2 points), so a piece's rate is κ·max|sin| + CURVATURE_FACTOR·√κ, never above κ (the slope
#: bound everywhere). Without it a cell of 2e-4 rad at κ = 11 437 holding its peak got 2 points and 1.2e-10 error.
CURVATURE_FACTOR = 4.0
#: no piece is wider than this (radians): over a piece of about π the curvature of cos and sin themselves defeats the
#: e^{cu} model at small κ (3e-11 on cells 2.8 rad wide at κ = 1.65); the solver's cells are narrower anyway
#: (split beyond twice the initial width, below 1)
MAX_PIECE = 0.5
#: on S² every piece near a pole gets at least the 4-point rule (row 1 of ``RULE``): next to a pole the factors
#: sinθ'·(1 + s(2v − 1)) (v ∝ θ'²) and sin²θ'·I₁ are polynomials of degree 3 and 5 whose coefficients do not
#: shrink with the piece, so the 2-point rule's error there was first order in the piece (1.3e-10 on cells 3e-4 rad
#: wide at the poles); 4 points integrate degree 7 exactly
SPHERE_MIN_ROW = 1
#: ... within this angle of a pole (radians), where sinθ' is that small; elsewhere sinθ' is smooth on the scale of a
#: cell and the rule's 1e-4 margin covers it
POLAR_CAP = 0.1
#: a cell is windowed only when narrower than this (radians): the window then is one piece of it or none
WINDOW_MAX_WIDTH = 0.5 * np.pi

#: the cells of one evaluation: ``edges`` (M+1,) increasing, ``log_density`` (M,) the log of each cell's mean
#: density (any common factor cancels), ``slopes`` (M,) its linear reconstruction in [−1, 1]
_Cells = namedtuple("_Cells", "edges log_density slopes")
#: every query's score κ cos(ϑ' − α) and, on S², its Bessel argument ζ (``zeta`` = 0 on the circle); arrays (Q,)
_Scores = namedtuple("_Scores", "kappa alpha zeta")
#: the geometry (``sphere``: S², else the circle) and the rule (``fast``: windows, local rates and the node table)
_Mode = namedtuple("_Mode", "sphere fast")
#: one query's score, with cos α and sin α
_Query = namedtuple("_Query", "kappa alpha zeta cos_alpha sin_alpha")
#: one cell as one query sees it: its edges, its reconstruction's slope and cmax, the largest cos(ϑ' − α) on it
#: (the exponent's scale)
_Cell = namedtuple("_Cell", "lo hi slope cmax")
#: every cell's nodes as one piece (``_node_table``): cos ϑ, sin ϑ and weight·r(ϑ)·(sin ϑ on S²) per (cell, node),
#: and the number of nodes per cell (0 where one piece would not do)
_NodeTable = namedtuple("_NodeTable", "cos sin weight count")


@njit(cache=True, inline="always")
def _sin_max(lo, hi, alpha):
    """max of |sin(ϑ − α)| over [lo, hi] (1 where hi − lo ≥ π)."""
    a = lo + ((alpha + 0.5 * np.pi - lo) % np.pi)  # the first point at or after lo where |sin| = 1
    if a <= hi or hi - lo >= np.pi:
        return 1.0
    return max(abs(math.sin(lo - alpha)), abs(math.sin(hi - alpha)))


@njit(cache=True, inline="always")
def _window(lo, hi, alpha, half):
    """[lo, hi] ∩ {ϑ : |ϑ − α| ≤ half modulo 2π} as (a, b), a > b if empty; half < π/2 and hi − lo < π/2,
    so the two copies of the arc around α nearest to the cell cannot both meet it."""
    c = lo + ((alpha - lo) % (2.0 * np.pi))  # α's copy in [lo, lo + 2π)
    a, b = max(lo, c - half), min(hi, c + half)
    if a <= b:
        return a, b
    return max(lo, c - 2.0 * np.pi - half), min(hi, c - 2.0 * np.pi + half)


@njit(cache=True, inline="always")
def _position_in_cell(offset, lo, width, span, sphere):
    """v ∈ [0, 1], the position of ϑ = lo + offset in the cell [lo, lo + width]: linear in ϑ on the circle, in
    cos ϑ on S² (cos lo − cos ϑ over cos lo − cos hi, each as a product of sines). From the offset, not from ϑ − lo:
    in a cell of width 1e-7 at ϑ ≈ 3 the difference would carry a relative error of 1e-9."""
    if sphere:
        return math.sin(lo + 0.5 * offset) * math.sin(0.5 * offset) / span
    return offset / width


@njit(cache=True, inline="always")
def _cell_sums(cell, a, b, query, mode, rule, acc):
    """Add the cell's Σ w e^{κ(cos(ϑ'−α) − cmax)}·r(ϑ')·(f0, f1, f2) over its window [a, b] ⊆ [lo, hi] to
    acc[0:3] (Gauss–Legendre, order per piece).

    r = 1 + slope·(2v − 1) is the cell's linear density reconstruction relative to its mean (``density_slopes``;
    v ∈ [0, 1] the position in the cell, ``_position_in_cell``).
    Circle: (f0, f1, f2) = (1, cos ϑ', sin ϑ'). S²: the azimuthal integrals, (sinθ' ive0, sinθ' cosθ' ive0,
    sin²θ' ive1) with ive_ν = e^{−ζ'}I_ν(ζ'), ζ' = ζ sinθ'. On [a, b] the log-integrand's derivative is below
    κ·max|sin(ϑ' − α)| + ζ + 1, and its curvature is counted by ``CURVATURE_FACTOR`` (with ``mode.fast``; else the
    rate is κ + ζ + 1 on every piece).
    """
    lo, hi, slope, cmax = cell.lo, cell.hi, cell.slope, cell.cmax
    kappa, alpha, zeta = query.kappa, query.alpha, query.zeta
    sphere = mode.sphere
    width = hi - lo
    length = b - a
    rate = kappa
    if mode.fast and kappa > CURVATURE_FACTOR * CURVATURE_FACTOR:  # below, the curvature term alone reaches κ
        rate = min(kappa, kappa * _sin_max(a, b, alpha) + CURVATURE_FACTOR * math.sqrt(kappa))
    kappa_eff = rate + zeta + (2.0 if sphere else 1.0)  # S²'s factors sinθ' cosθ', sin²θ' vary at frequency 2
    n_sub = max(1, int(math.ceil(kappa_eff * length / (2.0 * SUB_HALF_VARIATION))), int(math.ceil(length / MAX_PIECE)))
    h = length / n_sub
    row = _pick_order(0.5 * kappa_eff * h, rule.limits)
    if sphere and row < SPHERE_MIN_ROW and (a < POLAR_CAP or b > np.pi - POLAR_CAP):
        row = SPHERE_MIN_ROW
    n = rule.orders[row]
    span = math.sin(0.5 * (lo + hi)) * math.sin(0.5 * width)
    start = a - lo
    for s in range(n_sub):
        mid = start + (s + 0.5) * h
        for g in range(n):
            offset = mid + 0.5 * h * rule.nodes[row, g]
            th = lo + offset
            v = _position_in_cell(offset, lo, width, span, sphere)
            w = (
                0.5
                * h
                * rule.weights[row, g]
                * math.exp(kappa * (math.cos(th - alpha) - cmax))
                * (1.0 + slope * (2.0 * v - 1.0))
            )
            if sphere:
                st = math.sin(th)
                i0, i1 = _scaled_bessel01(zeta * st)
                acc[0] += w * st * i0
                acc[1] += w * st * i0 * math.cos(th)
                acc[2] += w * st * st * i1
            else:
                acc[0] += w
                acc[1] += w * math.cos(th)
                acc[2] += w * math.sin(th)


@njit(cache=True)
def _node_table(cells, kappa_eff, sphere, rule, table):
    """Every cell's Gauss–Legendre nodes as one piece, for the largest κ_eff of all queries: (cos ϑ, sin ϑ,
    weight·r(ϑ)·(sin ϑ on S²)) in table.cos, table.sin, table.weight (cell, node) and the order in table.count; 0
    where one piece would not do (κ_eff·width > 2·SUB_HALF_VARIATION, or width > MAX_PIECE). A query then pays one
    exponential per node there.
    Serial: M·12 nodes cost little, and a second parallel region per evaluation would add a second barrier,
    which costs a scheduler slice whenever the job's threads share their cores with other jobs."""
    edges, slopes = cells.edges, cells.slopes
    for k in range(slopes.size):
        lo, hi = edges[k], edges[k + 1]
        width = hi - lo
        if kappa_eff * width > 2.0 * SUB_HALF_VARIATION or width > MAX_PIECE:
            table.count[k] = 0
            continue
        row = _pick_order(0.5 * kappa_eff * width, rule.limits)
        n = rule.orders[row]
        table.count[k] = n
        span = math.sin(0.5 * (lo + hi)) * math.sin(0.5 * width)
        for g in range(n):
            offset = 0.5 * width * (1.0 + rule.nodes[row, g])
            th = lo + offset
            v = _position_in_cell(offset, lo, width, span, sphere)
            st = math.sin(th)
            table.cos[k, g] = math.cos(th)
            table.sin[k, g] = st
            table.weight[k, g] = (
                0.5 * width * rule.weights[row, g] * (1.0 + slopes[k] * (2.0 * v - 1.0)) * (st if sphere else 1.0)
            )


@njit(cache=True, inline="always")
def _table_sums(table, k, cmax, query, sphere, acc):
    """``_cell_sums`` over the whole cell k from its node table (the same rule, one exponential per node)."""
    kappa, zeta, ca, sa = query.kappa, query.zeta, query.cos_alpha, query.sin_alpha
    for g in range(table.count[k]):
        c, s = table.cos[k, g], table.sin[k, g]
        w = table.weight[k, g] * math.exp(kappa * (c * ca + s * sa - cmax))
        if sphere:
            i0, i1 = _scaled_bessel01(zeta * s)
            acc[0] += w * i0
            acc[1] += w * i0 * c
            acc[2] += w * s * i1
        else:
            acc[0] += w
            acc[1] += w * c
            acc[2] += w * s


@njit(cache=True, inline="always")
def _kept_part(lo, hi, alpha, kappa, level):
    """The part (a, b) of the cell [lo, hi] where κ cos(ϑ − α) ≥ level (the threshold less the cell's base); the
    whole cell where that part is not one arc narrower than π (level ≤ 0) or the cell is wide; a > b if empty.
    The arc's half-width is widened by 1e-12 rad against the rounding of acos."""
    if not kappa > 0 or hi - lo >= WINDOW_MAX_WIDTH:
        return lo, hi
    c = level / kappa
    if c <= 0.0:
        return lo, hi
    if c >= 1.0:
        return 1.0, 0.0
    return _window(lo, hi, alpha, math.acos(c) + 1e-12)


@njit(cache=True, parallel=True)
def _softmax_sums(cells, scores, mode, rule, out):
    """Per query q, the ratios (Σ f1, Σ f2)/Σ f0 of ``_cell_sums`` over all cells that can matter; out (Q, 2).

    ``cells`` a ``_Cells``, ``scores`` a ``_Scores``. Cell k is at most e^{U_k}, U_k = base_k + κ max_cell cos(ϑ' − α)
    (every other factor is ≤ 1); the cell with the largest U is integrated first over its window at
    U − PRUNE_DEPTH, giving a lower bound L of the log of the total; cells with U_k < L − PRUNE_DEPTH are skipped,
    and the others integrated over their window at L − PRUNE_DEPTH. Each cell is scaled by its own largest
    exponent, so none underflows however deep it lies. ``mode.fast`` switches on the windows, the local rate and
    the node table; without it every kept cell is integrated whole at the rate κ + ζ + 1 (the plain rule, kept as
    the benchmark's baseline and the tests' second opinion).
    """
    edges, log_density, slopes = cells.edges, cells.log_density, cells.slopes
    kappa, alpha, zeta = scores.kappa, scores.alpha, scores.zeta
    sphere, fast = mode.sphere, mode.fast
    m = log_density.size
    if kappa.size == 0:
        return
    base = np.empty(m)
    cos_edge, sin_edge = np.cos(edges), np.sin(edges)
    for k in range(m):
        base[k] = log_density[k] + math.log1p(abs(slopes[k])) + math.log(edges[k + 1] - edges[k])
    # the node table on the circle only: on S² every node needs its own Bessel factors, which a table cannot hold,
    # and its order (for the largest κ) would cost more of them than the per-query rule (measured 2.5x slower)
    width = rule.nodes.shape[1]
    table = _NodeTable(np.empty((m, width)), np.empty((m, width)), np.empty((m, width)), np.zeros(m, dtype=np.int64))
    if fast and not sphere:
        _node_table(cells, min(np.max(kappa), TABLE_MAX_KAPPA) + 1.0, sphere, rule, table)
    for q in prange(kappa.size):
        kq, aq = kappa[q], alpha[q]
        query = _Query(kq, aq, zeta[q], math.cos(aq), math.sin(aq))
        ca, sa = query.cos_alpha, query.sin_alpha
        use_table = kq <= TABLE_MAX_KAPPA
        bound = np.empty(m)
        cm = np.empty(m)
        best = 0
        for k in range(m):
            lo = edges[k]
            if lo + ((aq - lo) % (2.0 * np.pi)) <= edges[k + 1]:
                cm[k] = 1.0
            else:  # cos(lo − α), cos(hi − α) from the edges' own cosines and sines
                cm[k] = max(cos_edge[k] * ca + sin_edge[k] * sa, cos_edge[k + 1] * ca + sin_edge[k + 1] * sa)
            bound[k] = base[k] + kq * cm[k]
            if bound[k] > bound[best]:
                best = k
        acc = np.zeros(3)
        a, b = edges[best], edges[best + 1]
        if fast:
            a, b = _kept_part(a, b, aq, kq, bound[best] - PRUNE_DEPTH - base[best])
        _cell_sums(_Cell(edges[best], edges[best + 1], slopes[best], cm[best]), a, b, query, mode, rule, acc)
        shift = log_density[best] + kq * cm[best]
        lower = shift + math.log(acc[0])
        total = np.zeros(3)
        for k in range(m):
            if bound[k] < lower - PRUNE_DEPTH:
                continue
            acc[:] = 0.0
            lo, hi = edges[k], edges[k + 1]
            a, b = lo, hi
            if fast:
                a, b = _kept_part(lo, hi, aq, kq, lower - PRUNE_DEPTH - base[k])
                if not a < b:
                    continue
            if use_table and table.count[k] > 0 and a == lo and b == hi:
                _table_sums(table, k, cm[k], query, sphere, acc)
            else:
                _cell_sums(_Cell(lo, hi, slopes[k], cm[k]), a, b, query, mode, rule, acc)
            scale = math.exp(log_density[k] + kq * cm[k] - shift)
            total[0] += scale * acc[0]
            total[1] += scale * acc[1]
            total[2] += scale * acc[2]
        out[q, 0] = total[1] / total[0]
        out[q, 1] = total[2] / total[0]


def softmax_means(
    red: Reduction, edges: np.ndarray, masses: np.ndarray, beta: float, queries: np.ndarray, *, fast: bool = True
) -> np.ndarray:
    """Softmax means of the cells' density at the query angles, shape (Q, 2).

    ``fast`` (default) integrates each kept cell over its window only, at its local rate, from the node table where
    one piece does (``_softmax_sums``); ``fast=False`` is the plain rule, equal to it within QUADRATURE_RTOL.

    The density is each cell's linear reconstruction (``density_slopes``), not a constant: at large β the
    kernel e^{κ cos} is narrower than a cell, and the softmax mean's shift by the density's gradient (the
    β-effect, of order 1/κ) is seen only through that slope (docs/mean_field.md, "The softmax integrals").
    Circle: the mean vector (x, y). S²: its components along e and along the query's azimuth.
    """
    edges = np.ascontiguousarray(edges, dtype=float)
    queries = np.ascontiguousarray(queries, dtype=float)
    out = np.empty((queries.size, 2))
    with np.errstate(divide="ignore"):
        log_density = np.log(masses) - np.log(cell_measure(red, edges))
    cells = _Cells(edges, log_density, np.ascontiguousarray(density_slopes(red, edges, masses)))
    if red.geometry == "circle":
        # score β⟨Bᵀx, y⟩ = κ cos(φ − α), (κ, α) the polar form of βBᵀx
        a = beta * np.stack([np.cos(queries), np.sin(queries)], axis=-1) @ red.B
        scores = _Scores(np.hypot(a[:, 0], a[:, 1]), np.arctan2(a[:, 1], a[:, 0]), np.zeros(queries.size))
        _softmax_sums(cells, scores, _Mode(False, fast), RULE, out)
        return out
    # β b_a cosθ cosθ' + β|b_p| sinθ sinθ' = κ cos(θ' − α); the rest of the azimuthal integral is e^{−ζ'}I_ν(ζ')
    p1, p2 = red.b_axis * np.cos(queries), abs(red.b_perp) * np.sin(queries)
    scores = _Scores(beta * np.hypot(p1, p2), np.arctan2(p2, p1), beta * abs(red.b_perp) * np.sin(queries))
    _softmax_sums(cells, scores, _Mode(True, fast), RULE, out)
    out[:, 1] *= 1.0 if red.b_perp >= 0 else -1.0  # I₁ is odd
    return out


def edge_velocity(
    red: Reduction, edges: np.ndarray, masses: np.ndarray, beta: float, queries: np.ndarray, *, fast: bool = True
) -> np.ndarray:
    """dϑ/dt of the mean field at the query angles (the tangential component of Eq. 2's velocity)."""
    means = softmax_means(red, edges, masses, beta, queries, fast=fast)
    if red.geometry == "circle":
        vm = means @ red.V.T  # V m
        return -np.sin(queries) * vm[:, 0] + np.cos(queries) * vm[:, 1]
    return -np.sin(queries) * red.v_axis * means[:, 0] + np.cos(queries) * red.v_perp * means[:, 1]
