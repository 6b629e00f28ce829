"""Mean-field reference solutions of Eq. 2 where a symmetry makes them one-dimensional.

Two reductions (derivation, accuracy and measured convergence: docs/mean_field.md):

The reductions themselves (``lowtemp.dynamics.reduction``, no numba, what the config check uses):

* ``circle`` (d = 2, any B and V): a token is an angle θ, x = (cos θ, sin θ).
* ``axisymmetric`` (d = 3): B = b_a e eᵀ + b_p (I − e eᵀ) and V = v_a e eᵀ + v_p (I − e eᵀ)
  for one unit axis e, and ρ0 invariant under rotations about e. The density then
  depends on the polar angle θ = ∠(x, e) alone, and (reflection symmetry through
  every plane containing e) every token keeps its azimuth φ.

Both are solved by the same Lagrangian scheme: the Lagrangian coordinate ϑ (θ on
the circle, the polar angle on S²) is cut into cells [ϑ_k, ϑ_{k+1}] of fixed mass
m_k, the density on each cell is its linear reconstruction (per unit angle on the circle,
per unit area on S²; ``density_slopes``), and the cell edges move with the mean-field velocity of that
piecewise-linear density, dϑ_k/dt = v(ϑ_k). Mass is conserved exactly (a cell's
mass never changes), and the velocity is the softmax average of V y over the
cells' linear density reconstruction, integrated over every cell to a relative accuracy
``QUADRATURE_RTOL`` in log space: each cell's integral is scaled by its own
largest exponent, so a cell whose weight is e^{−500} of the largest is still
resolved, and cells that cannot matter (upper bound below e^{−PRUNE_DEPTH} of a
proven lower bound of the total) are skipped, which makes the cost at large β
independent of how deep the density at the Laplace point lies. On S² the
azimuthal integral is 2π I_ν(β b_p sin θ sin θ') (ν = 0, 1), evaluated scaled
(``scaled_bessel``).

The initial cells are uniform in angle, or graded towards the points of E1⊥ (the
unstable set of the zero-temperature flow) on request; cells that stretch (the
one straddling the finite-β separatrix between two clusters) are split as they
grow, with the density unchanged (``split_cells``), so every cell stays resolved.

Arrays: ``edges`` has layout (time, edge); tokens (…, token, dim) as everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange
from scipy.integrate import DOP853

from ..model import measures, projection
from . import integrate
from .reduction import RESOLVED_WIDTH, Reduction, check_edges, graded_edges, uniform_edges

#: relative accuracy of every cell's softmax integral (Gauss–Legendre, order chosen per cell)
QUADRATURE_RTOL = 1e-12
#: cells whose contribution is provably below e^{−PRUNE_DEPTH} of the total's lower bound are skipped;
#: the skipped mass is at most (cells)·e^{−40} ≈ 4e-18·cells of the total, far below QUADRATURE_RTOL
PRUNE_DEPTH = 40.0
#: a cell is split into sub-intervals on which its log-integrand varies by at most 2·SUB_HALF_VARIATION: 4 is
#: what the 12-point rule integrates to QUADRATURE_RTOL (``_LIMITS[-1]`` = 4.03), so no sub-interval is cut
#: finer than its accuracy needs (with 1, the solves took 1.9x as long for the same numbers to 2.4e-12)
SUB_HALF_VARIATION = 4.0
#: below this argument the scaled Bessel functions are summed as power series, above it asymptotically
_BESSEL_SWITCH = 20.0
#: tolerances of the edges' ODE (angles, so absolute and relative alike)
ODE_RTOL = 1e-10
ODE_ATOL = 1e-12


# ---------------------------------------------------------------------------------------------
# Gauss–Legendre rules. The n-point rule integrates e^{cu} on [−1, 1] with relative error about
# E_n c^{2n}, E_n = 2^{2n+1}(n!)^4 / ((2n+1)((2n)!)^3). A sub-interval of half-variation c uses
# the smallest n in _ORDERS with E_n c^{2n} ≤ QUADRATURE_RTOL.

_ORDERS = np.array([2, 4, 6, 8, 12])


def _legendre_error_constant(n: int) -> float:
    return 2.0 ** (2 * n + 1) * math.factorial(n) ** 4 / ((2 * n + 1) * math.factorial(2 * n) ** 3)


def _order_limits(rtol: float) -> np.ndarray:
    """Largest half-variation c each order in _ORDERS meets ``rtol`` at."""
    return np.array([(rtol / _legendre_error_constant(int(n))) ** (1.0 / (2 * n)) for n in _ORDERS])


def _rule_table() -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of every order, padded to (orders, max order)."""
    width = int(_ORDERS.max())
    nodes = np.zeros((_ORDERS.size, width))
    weights = np.zeros((_ORDERS.size, width))
    for row, n in enumerate(_ORDERS):
        x, w = np.polynomial.legendre.leggauss(int(n))
        nodes[row, :n], weights[row, :n] = x, w
    return nodes, weights


_NODES, _WEIGHTS = _rule_table()
# the error constant is that of e^{cu} alone; the integrands also carry cos, sin and (on S²) Bessel and
# sine factors, so every order is chosen for 1e-4 of the target (measured: errors ≤ 1e-13 relative, tests)
_LIMITS = _order_limits(QUADRATURE_RTOL * 1e-4)
if _LIMITS[-1] < SUB_HALF_VARIATION:  # the largest order must cover a whole sub-interval
    raise RuntimeError("meanfield: the largest Gauss–Legendre order cannot reach QUADRATURE_RTOL")


@njit(cache=True, inline="always")
def _pick_order(c, limits):
    for row in range(limits.size):
        if c <= limits[row]:
            return row
    return limits.size - 1


@njit(cache=True, inline="always")
def _cos_max(lo, hi, alpha):
    """max of cos(ϑ − α) over [lo, hi] (hi − lo < 2π)."""
    two_pi = 2.0 * np.pi
    a = lo + ((alpha - lo) % two_pi)
    if a <= hi:
        return 1.0
    return max(math.cos(lo - alpha), math.cos(hi - alpha))


# ---------------------------------------------------------------------------------------------
# Scaled modified Bessel functions e^{−x} I_0(x), e^{−x} I_1(x), x ≥ 0.


@njit(cache=True)
def _scaled_bessel01(x):
    if x < _BESSEL_SWITCH:
        # power series, all terms positive: I_0 = Σ q^k/(k!)², I_1 = (x/2) Σ q^k/(k!(k+1)!), q = x²/4
        q = 0.25 * x * x
        t0 = 1.0
        t1 = 1.0
        s0 = 1.0
        s1 = 1.0
        k = 1
        while True:
            t0 *= q / (k * k)
            t1 *= q / (k * (k + 1))
            s0 += t0
            s1 += t1
            if t0 <= 1e-17 * s0 and t1 <= 1e-17 * s1:
                break
            k += 1
        e = math.exp(-x)
        return s0 * e, 0.5 * x * s1 * e
    # asymptotic series e^{−x} I_ν(x) ~ (2πx)^{−1/2} Σ_k (−1)^k a_k(ν) x^{−k},
    # a_k(ν) = Π_{j≤k} (4ν² − (2j−1)²)/(8j); at x ≥ 20 its smallest term is below 1e-16
    pre = 1.0 / math.sqrt(2.0 * np.pi * x)
    s0 = 1.0
    s1 = 1.0
    t0 = 1.0
    t1 = 1.0
    for j in range(1, 60):
        odd = (2 * j - 1) * (2 * j - 1)
        n0 = -t0 * (0.0 - odd) / (8.0 * j * x)
        n1 = -t1 * (4.0 - odd) / (8.0 * j * x)
        if abs(n0) >= abs(t0) or abs(n1) >= abs(t1) and j > 1:
            break
        t0 = n0
        t1 = n1
        s0 += t0
        s1 += t1
        if abs(t0) <= 1e-17 * s0 and abs(t1) <= 1e-17 * abs(s1):
            break
    return pre * s0, pre * s1


@njit(cache=True)
def _scaled_bessel_array(x, out0, out1):
    for i in range(x.size):
        out0[i], out1[i] = _scaled_bessel01(x[i])


def scaled_bessel(x) -> tuple[np.ndarray, np.ndarray]:
    """(e^{−x} I_0(x), e^{−x} I_1(x)) for x ≥ 0, to about 1e-15 relative."""
    x = np.asarray(x, dtype=float)
    if np.any(~(x >= 0)):
        raise ValueError("scaled_bessel: arguments must be finite and ≥ 0")
    flat = np.ascontiguousarray(x.ravel())
    out0, out1 = np.empty_like(flat), np.empty_like(flat)
    _scaled_bessel_array(flat, out0, out1)
    return out0.reshape(x.shape), out1.reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# The softmax averages. For a query with score κ cos(ϑ' − α) (+ a Bessel factor on S²), cell k's
# contribution is bounded above by e^{U_k}, U_k = base_k + κ·max_cell cos(ϑ' − α), base_k = log m̄_k +
# log(1 + |slope_k|) + log width_k with m̄_k the cell's mean density. The cell with the largest bound is
# integrated first; its log-integral L is a lower bound of the total, and every cell with U_k < L − PRUNE_DEPTH
# is skipped. Inside a cell that is kept, the part where base_k + κ cos(ϑ' − α) < L − PRUNE_DEPTH is skipped
# too (its window, ``_window``): at large κ the kernel is far narrower than a cell, and the integrand's
# derivative on the window is κ·max|sin(ϑ' − α)| there, not κ, so the window needs far fewer nodes. Every
# skipped cell, and the skipped parts of a kept cell together, are at most e^{L − PRUNE_DEPTH}: with M cells the
# skipped share of the total is below M·e^{−PRUNE_DEPTH}.

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
#: on S² every piece near a pole gets at least the 4-point rule (row 1 of _ORDERS): next to a pole the factors
#: sinθ'·(1 + s(2v − 1)) (v ∝ θ'²) and sin²θ'·I₁ are polynomials of degree 3 and 5 whose coefficients do not
#: shrink with the piece, so the 2-point rule's error there was first order in the piece (1.3e-10 on cells 3e-4 rad
#: wide at the poles); 4 points integrate degree 7 exactly
SPHERE_MIN_ROW = 1
#: ... within this angle of a pole (radians), where sinθ' is that small; elsewhere sinθ' is smooth on the scale of a
#: cell and the rule's 1e-4 margin covers it
POLAR_CAP = 0.1
#: a cell is windowed only when narrower than this (radians): the window then is one piece of it or none
WINDOW_MAX_WIDTH = 0.5 * np.pi


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
def _cell_sums(lo, hi, a, b, slope, kappa, alpha, cmax, zeta, sphere, local, limits, nodes, weights, acc):
    """Add the cell's Σ w e^{κ(cos(ϑ'−α) − cmax)}·r(ϑ')·(f0, f1, f2) over its window [a, b] ⊆ [lo, hi] to
    acc[0:3] (Gauss–Legendre, order per piece).

    r = 1 + slope·(2v − 1) is the cell's linear density reconstruction relative to its mean (``density_slopes``;
    v ∈ [0, 1] the position in the cell, ``_position_in_cell``).
    Circle: (f0, f1, f2) = (1, cos ϑ', sin ϑ'). S²: the azimuthal integrals, (sinθ' ive0, sinθ' cosθ' ive0,
    sin²θ' ive1) with ive_ν = e^{−ζ'}I_ν(ζ'), ζ' = ζ sinθ'. On [a, b] the log-integrand's derivative is below
    κ·max|sin(ϑ' − α)| + ζ + 1, and its curvature is counted by ``CURVATURE_FACTOR`` (with ``local``; else the
    rate is κ + ζ + 1 on every piece).
    """
    width = hi - lo
    length = b - a
    rate = kappa
    if local and kappa > CURVATURE_FACTOR * CURVATURE_FACTOR:  # below, the curvature term alone reaches κ
        rate = min(kappa, kappa * _sin_max(a, b, alpha) + CURVATURE_FACTOR * math.sqrt(kappa))
    kappa_eff = rate + zeta + (2.0 if sphere else 1.0)  # S²'s factors sinθ' cosθ', sin²θ' vary at frequency 2
    n_sub = max(1, int(math.ceil(kappa_eff * length / (2.0 * SUB_HALF_VARIATION))), int(math.ceil(length / MAX_PIECE)))
    h = length / n_sub
    row = _pick_order(0.5 * kappa_eff * h, limits)
    if sphere and row < SPHERE_MIN_ROW and (a < POLAR_CAP or b > np.pi - POLAR_CAP):
        row = SPHERE_MIN_ROW
    n = _ORDERS_NB[row]
    span = math.sin(0.5 * (lo + hi)) * math.sin(0.5 * width)
    start = a - lo
    for s in range(n_sub):
        mid = start + (s + 0.5) * h
        for g in range(n):
            offset = mid + 0.5 * h * nodes[row, g]
            th = lo + offset
            v = _position_in_cell(offset, lo, width, span, sphere)
            w = (
                0.5
                * h
                * weights[row, g]
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


_ORDERS_NB = _ORDERS.astype(np.int64)


@njit(cache=True)
def _node_table(edges, slopes, kappa_eff, sphere, limits, nodes, weights, tab_c, tab_s, tab_w, tab_n):
    """Every cell's Gauss–Legendre nodes as one piece, for the largest κ_eff of all queries: (cos ϑ, sin ϑ,
    weight·r(ϑ)·(sin ϑ on S²)) in tab_c, tab_s, tab_w (cell, node) and the order in tab_n; 0 where one piece
    would not do (κ_eff·width > 2·SUB_HALF_VARIATION, or width > MAX_PIECE). A query then pays one exponential per
    node there.
    Serial: M·12 nodes cost little, and a second parallel region per evaluation would add a second barrier,
    which costs a scheduler slice whenever the job's threads share their cores with other jobs."""
    for k in range(slopes.size):
        lo, hi = edges[k], edges[k + 1]
        width = hi - lo
        if kappa_eff * width > 2.0 * SUB_HALF_VARIATION or width > MAX_PIECE:
            tab_n[k] = 0
            continue
        row = _pick_order(0.5 * kappa_eff * width, limits)
        n = _ORDERS_NB[row]
        tab_n[k] = n
        span = math.sin(0.5 * (lo + hi)) * math.sin(0.5 * width)
        for g in range(n):
            offset = 0.5 * width * (1.0 + nodes[row, g])
            th = lo + offset
            v = _position_in_cell(offset, lo, width, span, sphere)
            st = math.sin(th)
            tab_c[k, g] = math.cos(th)
            tab_s[k, g] = st
            tab_w[k, g] = 0.5 * width * weights[row, g] * (1.0 + slopes[k] * (2.0 * v - 1.0)) * (st if sphere else 1.0)


@njit(cache=True, inline="always")
def _table_sums(k, ca, sa, kappa, cmax, zeta, sphere, tab_c, tab_s, tab_w, tab_n, acc):
    """``_cell_sums`` over the whole cell k from its node table (the same rule, one exponential per node)."""
    for g in range(tab_n[k]):
        c, s = tab_c[k, g], tab_s[k, g]
        w = tab_w[k, g] * math.exp(kappa * (c * ca + s * sa - cmax))
        if sphere:
            i0, i1 = _scaled_bessel01(zeta * s)
            acc[0] += w * i0
            acc[1] += w * i0 * c
            acc[2] += w * s * i1
        else:
            acc[0] += w
            acc[1] += w * c
            acc[2] += w * s


@njit(cache=True, parallel=True)
def _softmax_sums(edges, log_density, slopes, kappa, alpha, zeta, sphere, fast, limits, nodes, weights, out):
    """Per query q, the ratios (Σ f1, Σ f2)/Σ f0 of ``_cell_sums`` over all cells that can matter; out (Q, 2).

    ``edges`` (M+1,) increasing; ``log_density`` (M,) the log of each cell's mean density (any common
    factor cancels), ``slopes`` (M,) its linear reconstruction in [−1, 1]. Cell k is at most e^{U_k},
    U_k = base_k + κ max_cell cos(ϑ' − α) (every other factor is ≤ 1); the cell with the largest U is integrated
    first over its window at U − PRUNE_DEPTH, giving a lower bound L of the log of the total; cells with
    U_k < L − PRUNE_DEPTH are skipped, and the others integrated over their window at L − PRUNE_DEPTH. Each cell
    is scaled by its own largest exponent, so none underflows however deep it lies. ``fast`` switches on the
    windows, the local rate and the node table; without it every kept cell is integrated whole at the rate
    κ + ζ + 1 (the plain rule, kept as the benchmark's baseline and the tests' second opinion).
    """
    m = log_density.size
    if kappa.size == 0:
        return
    base = np.empty(m)
    cos_edge, sin_edge = np.cos(edges), np.sin(edges)
    for k in range(m):
        base[k] = log_density[k] + math.log1p(abs(slopes[k])) + math.log(edges[k + 1] - edges[k])
    # the node table on the circle only: on S² every node needs its own Bessel factors, which a table cannot hold,
    # and its order (for the largest κ) would cost more of them than the per-query rule (measured 2.5x slower)
    tab_c, tab_s, tab_w = np.empty((m, _ORDERS.max())), np.empty((m, _ORDERS.max())), np.empty((m, _ORDERS.max()))
    tab_n = np.zeros(m, dtype=np.int64)
    if fast and not sphere:
        kappa_eff = min(np.max(kappa), TABLE_MAX_KAPPA) + 1.0
        _node_table(edges, slopes, kappa_eff, sphere, limits, nodes, weights, tab_c, tab_s, tab_w, tab_n)
    for q in prange(kappa.size):
        kq, aq, zq = kappa[q], alpha[q], zeta[q]
        ca, sa = math.cos(aq), math.sin(aq)
        table = kq <= TABLE_MAX_KAPPA
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
        _cell_sums(
            edges[best],
            edges[best + 1],
            a,
            b,
            slopes[best],
            kq,
            aq,
            cm[best],
            zq,
            sphere,
            fast,
            limits,
            nodes,
            weights,
            acc,
        )
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
            if table and tab_n[k] > 0 and a == lo and b == hi:
                _table_sums(k, ca, sa, kq, cm[k], zq, sphere, tab_c, tab_s, tab_w, tab_n, acc)
            else:
                _cell_sums(lo, hi, a, b, slopes[k], kq, aq, cm[k], zq, sphere, fast, limits, nodes, weights, acc)
            scale = math.exp(log_density[k] + kq * cm[k] - shift)
            total[0] += scale * acc[0]
            total[1] += scale * acc[1]
            total[2] += scale * acc[2]
        out[q, 0] = total[1] / total[0]
        out[q, 1] = total[2] / total[0]


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


# ---------------------------------------------------------------------------------------------
# The velocity of the edges.


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
    slopes = np.ascontiguousarray(density_slopes(red, edges, masses))
    if red.geometry == "circle":
        # score β⟨Bᵀx, y⟩ = κ cos(φ − α), (κ, α) the polar form of βBᵀx
        a = beta * np.stack([np.cos(queries), np.sin(queries)], axis=-1) @ red.B
        kappa, alpha, zeta = np.hypot(a[:, 0], a[:, 1]), np.arctan2(a[:, 1], a[:, 0]), np.zeros(queries.size)
        _softmax_sums(edges, log_density, slopes, kappa, alpha, zeta, False, fast, _LIMITS, _NODES, _WEIGHTS, out)
        return out
    # β b_a cosθ cosθ' + β|b_p| sinθ sinθ' = κ cos(θ' − α); the rest of the azimuthal integral is e^{−ζ'}I_ν(ζ')
    p1, p2 = red.b_axis * np.cos(queries), abs(red.b_perp) * np.sin(queries)
    kappa, alpha = beta * np.hypot(p1, p2), np.arctan2(p2, p1)
    zeta = beta * abs(red.b_perp) * np.sin(queries)
    _softmax_sums(edges, log_density, slopes, kappa, alpha, zeta, True, fast, _LIMITS, _NODES, _WEIGHTS, out)
    out[:, 1] *= 1.0 if red.b_perp >= 0 else -1.0  # I₁ is odd
    return out


def cell_measure(red: Reduction, edges: np.ndarray) -> np.ndarray:
    """Arc length (circle) or area (S²) of every cell, from its edges; accurate for tiny cells."""
    if red.geometry == "circle":
        return np.diff(edges, axis=-1)
    # area 2π(cos θ_k − cos θ_{k+1}) = 4π sin(mid) sin(half-width)
    lo, hi = edges[..., :-1], edges[..., 1:]
    return 4.0 * np.pi * np.sin(0.5 * (lo + hi)) * np.sin(0.5 * (hi - lo))


def edge_velocity(
    red: Reduction, edges: np.ndarray, masses: np.ndarray, beta: float, queries: np.ndarray, *, fast: bool = True
) -> np.ndarray:
    """dϑ/dt of the mean field at the query angles (the tangential component of Eq. 2's velocity)."""
    means = softmax_means(red, edges, masses, beta, queries, fast=fast)
    if red.geometry == "circle":
        vm = means @ red.V.T  # V m
        return -np.sin(queries) * vm[:, 0] + np.cos(queries) * vm[:, 1]
    return -np.sin(queries) * red.v_axis * means[:, 0] + np.cos(queries) * red.v_perp * means[:, 1]


# ---------------------------------------------------------------------------------------------
# Initial cells: graded towards the unstable set of the zero-temperature flow, masses from ρ0.


def _log_density0(red: Reduction, measure: str, params: dict, theta: np.ndarray) -> np.ndarray:
    """log of ρ0's density at the Lagrangian angles (per unit angle on the circle, per area on S²)."""
    if measure == "uniform":
        total = 2 * np.pi if red.geometry == "circle" else 4 * np.pi
        return np.full(theta.shape, -math.log(total))
    kappas = measures.check_kappas(params["kappas"])
    weights = measures.check_weights(params.get("weights"), kappas.size)
    means = np.asarray(params["means"], dtype=float)
    means = means / np.linalg.norm(means, axis=1, keepdims=True)
    parts = []
    for kappa, w, mean in zip(kappas, weights, means):
        if red.geometry == "circle":
            cosine = np.cos(theta - math.atan2(mean[1], mean[0]))
            # vMF on S¹: e^{κ cos}/(2π I_0(κ)) = e^{κ(cos − 1)}/(2π e^{−κ}I_0(κ))
            log_norm = math.log(2 * np.pi) + math.log(scaled_bessel(kappa)[0])
        else:
            cosine = np.cos(theta) * float(mean @ red.frame[:, 0])
            # vMF on S²: κ e^{κ cos}/(4π sinh κ) = κ e^{κ(cos − 1)}/(2π(1 − e^{−2κ}))
            # (κ = 0: the uniform law, 1/(4π))
            log_norm = (
                math.log(2 * np.pi) + math.log(-math.expm1(-2 * kappa)) - math.log(kappa)
                if kappa > 0
                else math.log(4 * np.pi)
            )
        parts.append(math.log(w) + kappa * (cosine - 1.0) - log_norm)
    return np.logaddexp.reduce(np.stack(parts), axis=0)


def initial_masses(red: Reduction, edges: np.ndarray, measure: str, params: dict) -> np.ndarray:
    """ρ0's mass of every cell, by Gauss–Legendre on sub-intervals (relative accuracy as the field's)."""
    kappa = max(measures.check_kappas(params["kappas"]).max(), 0.0) if measure == "vmf_mixture" else 0.0
    nodes, weights = np.polynomial.legendre.leggauss(12)
    masses = np.zeros(edges.size - 1)
    width = np.diff(edges)
    n_sub = np.maximum(1, np.ceil((kappa + 1.0) * width / 2.0)).astype(int)
    for s_count in np.unique(n_sub):
        cells = np.nonzero(n_sub == s_count)[0]
        h = width[cells] / s_count
        for s in range(s_count):
            mid = edges[cells] + (s + 0.5) * h
            theta = mid[:, None] + 0.5 * h[:, None] * nodes[None, :]
            f = np.exp(_log_density0(red, measure, params, theta))
            if red.geometry == "axisymmetric":
                f = f * 2 * np.pi * np.sin(theta)
            masses[cells] += 0.5 * h * (f @ weights)
    return masses


# ---------------------------------------------------------------------------------------------
# The solution.


class CellsUnresolved(RuntimeError):
    """A cell has contracted below RESOLVED_WIDTH: the edges' angles cannot carry the solution further."""


#: cells are split when wider than this many times the initial ``width`` (checked every ``remesh_every``)
SPLIT_FACTOR = 2.0


def _stable_cos_difference(lo, hi):
    """cos lo − cos hi = 2 sin((lo + hi)/2) sin((hi − lo)/2), exact for tiny cells."""
    return 2.0 * np.sin(0.5 * (lo + hi)) * np.sin(0.5 * (hi - lo))


def density_slopes(red: Reduction, edges: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """The limited slope s_k ∈ [−1, 1] of every cell's linear density reconstruction, ρ ∝ 1 + s_k(2v − 1).

    v ∈ [0, 1] is the position inside the cell, linear in θ on the circle and in cos θ on S² (where the
    area element is d cos θ dφ), so the reconstruction is linear in the variable the cell's mass is uniform
    in. The slope is the monotonized-central limited difference of the neighbours' mean densities (per unit
    of that variable), clipped so that the density stays ≥ 0 on the cell; 0 at an extremum and at the poles.
    The cells' masses are unchanged (the reconstruction has the cell's mean): it only says where inside a
    cell a mass fraction lies (``push_forward``), to second order where the density is smooth, instead of
    the first order of a constant density.
    """
    edges = np.asarray(edges, dtype=float)
    masses = np.asarray(masses, dtype=float)
    if masses.shape != (edges.size - 1,) or not np.all(masses >= 0):
        raise ValueError(
            f"mean-field reference: need one mass ≥ 0 per cell ({edges.size - 1} cells), got shape "
            f"{masses.shape} with smallest {np.min(masses) if masses.size else float('nan'):.3g}"
        )
    if red.geometry == "circle":
        u_lo, u_hi = edges[:-1], edges[1:]
    else:  # u = −cos θ increases with θ
        u_lo, u_hi = -np.cos(edges[:-1]), -np.cos(edges[1:])
    width = cell_measure(red, edges) / (1.0 if red.geometry == "circle" else 2.0 * np.pi)
    mid = 0.5 * (u_lo + u_hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = masses / width
    if red.geometry == "circle":  # periodic neighbours
        rho_l, rho_r = np.roll(rho, 1), np.roll(rho, -1)
        mid_l, mid_r = np.roll(mid, 1), np.roll(mid, -1)
        mid_l[0] -= 2 * np.pi
        mid_r[-1] += 2 * np.pi
    else:
        rho_l, rho_r = np.concatenate([rho[:1], rho[:-1]]), np.concatenate([rho[1:], rho[-1:]])
        mid_l, mid_r = np.concatenate([mid[:1] - 1, mid[:-1]]), np.concatenate([mid[1:], mid[-1:] + 1])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        left = (rho - rho_l) / (mid - mid_l)
        right = (rho_r - rho) / (mid_r - mid)
        central = (rho_r - rho_l) / (mid_r - mid_l)
        same = np.sign(left) == np.sign(right)
        slope = np.where(
            same, np.sign(central) * np.minimum(np.abs(central), 2 * np.minimum(np.abs(left), np.abs(right))), 0.0
        )
        s = slope * 0.5 * (u_hi - u_lo) / rho
    s = np.where(np.isfinite(s), s, 0.0)
    if red.geometry != "circle":
        s[[0, -1]] = 0.0
    return np.clip(s, -1.0, 1.0)


def mass_fraction(v, s):
    """The mass fraction below position v ∈ [0, 1] of a cell whose density is ∝ 1 + s(2v − 1)."""
    return v * (1.0 + s * (v - 1.0))


def unit_position(F, s):
    """The inverse of ``mass_fraction``: the position v of mass fraction F, written without cancellation."""
    F = np.asarray(F, dtype=float)
    root = (1.0 - s) + np.sqrt(np.maximum((1.0 - s) ** 2 + 4.0 * s * F, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(F > 0, 2.0 * F / root, 0.0)  # root = 0 only at F = 0 with s = 1


@dataclass
class MeanFieldSolution:
    """The Lagrangian cells at ``times``.

    Cells are split as they stretch (``solve``), so their number grows with time. Layout (time, edge)
    for ``edges`` and (time, cell) for ``masses``, ``owner``, ``fraction_lo``, ``fraction_hi``, padded
    after each snapshot's last entry (NaN; owner −1). Every cell lies inside one initial cell (splits only
    subdivide): ``owner`` is its index among ``initial_edges``' cells and [fraction_lo, fraction_hi] the part
    of that initial cell's mass it holds. That pair is the Lagrangian coordinate, kept relative to one
    initial cell so that a cell of mass 1e-30 is located as exactly as a heavy one.
    """

    reduction: Reduction
    beta: float
    times: np.ndarray
    initial_edges: np.ndarray
    edges: np.ndarray
    masses: np.ndarray
    owner: np.ndarray
    fraction_lo: np.ndarray
    fraction_hi: np.ndarray
    evaluations: int = 0
    info: dict = field(default_factory=dict)
    initial_masses: np.ndarray | None = None

    def _cells(self, k: int) -> np.ndarray:
        return self.owner[k] >= 0

    def snapshot(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(edges, masses) of snapshot k, without padding (empty beyond ``info['resolved_until']``)."""
        cells = self._cells(k)
        return self.edges[k][: cells.sum() + 1] if cells.any() else self.edges[k][:0], self.masses[k][cells]

    def density(self, k: int) -> np.ndarray:
        """Density of every cell at snapshot k: per unit angle (circle), per unit area (S²)."""
        edges, masses = self.snapshot(k)
        return masses / cell_measure(self.reduction, edges)

    def distance_to_eigenspace(self, E: np.ndarray) -> np.ndarray:
        """sqrt(∫ |x − Px/|Px||² dρ_t) per snapshot (= 2 − 2|Px| on the sphere, computed without its cancellation:
        ``projection.squared_distance_to_great_sphere``), P the projector onto span(E) (E: (d, k) orthonormal).

        The mean-field counterpart of ``projection.distance_to_eigenspace``: 8-point Gauss–Legendre on every
        cell. On S² the integrand must not depend on the azimuth: E the axis, or the plane orthogonal to it.
        """
        E = np.asarray(E, dtype=float).reshape(self.reduction.frame.shape[0], -1)
        local = self.reduction.frame.T @ E  # E in the reduction's frame
        P = local @ local.T
        if self.reduction.geometry == "axisymmetric" and not (
            np.allclose(P, np.diag([1.0, 0, 0]), atol=1e-9) or np.allclose(P, np.diag([0, 1.0, 1.0]), atol=1e-9)
        ):
            raise ValueError(
                "mean-field reference: on S² the distance is computed to the axis or to the plane orthogonal to it only"
            )
        nodes, weights = np.polynomial.legendre.leggauss(8)
        out = np.empty(self.times.size)
        for k in range(self.times.size):
            edges, masses = self.snapshot(k)
            if masses.size == 0:  # beyond what the reference resolved (``solve(truncate=True)``)
                out[k] = np.nan
                continue
            lo, hi = edges[:-1, None], edges[1:, None]
            theta = 0.5 * (lo + hi) + 0.5 * (hi - lo) * nodes
            if self.reduction.geometry == "circle":
                x = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
                dens = np.ones_like(theta)  # density per unit angle is constant on the cell
            else:
                x = np.stack([np.cos(theta), np.sin(theta), np.zeros_like(theta)], axis=-1)
                dens = np.sin(theta)  # area element
            f = projection.squared_distance_to_great_sphere(x, local)
            cell_mean = (f * dens) @ weights / (dens @ weights)
            out[k] = math.sqrt(max(float(masses @ cell_mean), 0.0))
        return out

    def lagrangian_coordinate(self, X0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(initial cell, fraction of its mass before the token) of tokens X0 (…, token, dim) at t = 0."""
        X0 = np.asarray(X0, dtype=float)
        local = X0 @ self.reduction.frame
        edges = self.initial_edges
        if self.reduction.geometry == "circle":
            theta0 = np.arctan2(local[..., 1], local[..., 0])
            theta0 = edges[0] + (theta0 - edges[0]) % (2 * np.pi)
            k = np.clip(np.searchsorted(edges, theta0, side="right") - 1, 0, edges.size - 2)
            unit = (theta0 - edges[k]) / (edges[k + 1] - edges[k])
        else:
            theta0 = np.arccos(np.clip(local[..., 0], -1.0, 1.0))
            k = np.clip(np.searchsorted(edges, theta0, side="right") - 1, 0, edges.size - 2)
            # fraction of the cell's area above the token, written stably
            unit = _stable_cos_difference(edges[k], theta0) / _stable_cos_difference(edges[k], edges[k + 1])
        slopes = (
            np.zeros(edges.size - 1)
            if self.initial_masses is None
            else density_slopes(self.reduction, edges, self.initial_masses)
        )
        return k, mass_fraction(np.clip(unit, 0.0, 1.0), slopes[k])

    def push_forward(self, X0: np.ndarray) -> np.ndarray:
        """The reference's flow map applied to tokens X0 (…, token, dim) at t = 0: layout (…, time, token, dim).

        A token keeps its Lagrangian coordinate (``lagrangian_coordinate``); at time t it sits in the cell of
        its initial cell that holds its mass fraction, where the cell's linear density reconstruction
        (``density_slopes``: linear in θ on the circle, in cos θ on S²) puts it, azimuth kept. The same
        reconstruction gives the fraction at t = 0, so the map is the identity there. NaN beyond
        ``info['resolved_until']``.
        """
        X0 = np.asarray(X0, dtype=float)
        red = self.reduction
        owner0, phi = self.lagrangian_coordinate(X0)
        local = X0 @ red.frame
        out = np.empty(integrate.trajectory_shape(X0.shape, self.times.size))
        for t in range(self.times.size):
            edges, masses = self.snapshot(t)
            if masses.size == 0:
                out[..., t, :, :] = np.nan
                continue
            cells = self._cells(t)
            owner, lo_f, hi_f = self.owner[t][cells], self.fraction_lo[t][cells], self.fraction_hi[t][cells]
            # cells are ordered by (owner, fraction): search the key owner + fraction, then keep the result among
            # the cells of the token's own initial cell (the key's rounding cannot move it to another owner)
            first = np.searchsorted(owner, owner0, side="left")
            last = np.searchsorted(owner, owner0, side="right") - 1
            k = np.clip(np.searchsorted(owner + lo_f, owner0 + phi, side="right") - 1, first, last)
            frac = np.clip((phi - lo_f[k]) / (hi_f[k] - lo_f[k]), 0.0, 1.0)
            frac = unit_position(frac, density_slopes(red, edges, masses)[k])
            lo, hi = edges[k], edges[k + 1]
            if red.geometry == "circle":
                theta = lo + frac * (hi - lo)
                out[..., t, :, :] = np.stack([np.cos(theta), np.sin(theta)], axis=-1) @ red.frame.T
                continue
            z = np.clip(np.cos(lo) - frac * _stable_cos_difference(lo, hi), -1.0, 1.0)
            s = np.sqrt((1.0 - z) * (1.0 + z))
            radial = np.hypot(local[..., 1], local[..., 2])
            with np.errstate(invalid="ignore", divide="ignore"):
                cphi = np.where(radial > 0, local[..., 1] / radial, 1.0)
                sphi = np.where(radial > 0, local[..., 2] / radial, 0.0)
            out[..., t, :, :] = np.stack([z, s * cphi, s * sphi], axis=-1) @ red.frame.T
        return out


def split_cells(
    red: Reduction,
    edges: np.ndarray,
    masses: np.ndarray,
    widest: float,
    lagrangian: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
):
    """Cut every cell wider than ``widest`` (radians) into equal-angle pieces no wider than it.

    A piece's mass is what the cell's linear density reconstruction (``density_slopes``, the density the
    softmax integrals and ``push_forward`` use) puts on it, and its Lagrangian fractions are that
    reconstruction's mass fractions at its ends, so every initial cell's mass is kept (a constant density per
    cell would move mass by O(slope) at every split); the slopes are recomputed from the new neighbours later.
    With ``lagrangian`` = (owner, fraction_lo, fraction_hi) per cell (``MeanFieldSolution``), the pieces' are
    returned too:
    (edges, masses[, (owner, fraction_lo, fraction_hi)]).
    """
    if lagrangian is None:
        lagrangian = (np.arange(masses.size), np.zeros(masses.size), np.ones(masses.size))
        with_lagrangian = False
    else:
        with_lagrangian = True
    owner, f_lo, f_hi = lagrangian
    width = np.diff(edges)
    pieces = np.maximum(1, np.ceil(width / widest - 1e-12)).astype(int)
    if np.all(pieces == 1):
        return (edges, masses, lagrangian) if with_lagrangian else (edges, masses)
    slopes = density_slopes(red, edges, masses)
    new_edges, new_masses = [edges[:1]], []
    new_owner, new_lo, new_hi = [], [], []
    for k in range(masses.size):
        if pieces[k] == 1:
            new_edges.append(edges[k + 1 : k + 2])
            new_masses.append(masses[k : k + 1])
            new_owner.append(owner[k : k + 1])
            new_lo.append(f_lo[k : k + 1])
            new_hi.append(f_hi[k : k + 1])
            continue
        cut = edges[k] + (edges[k + 1] - edges[k]) * np.arange(1, pieces[k] + 1) / pieces[k]
        cut[-1] = edges[k + 1]
        if red.geometry == "circle":  # the position in the cell, linear in θ (circle) or cos θ (S²)
            v = (cut - edges[k]) / (edges[k + 1] - edges[k])
        else:
            v = _stable_cos_difference(edges[k], cut) / _stable_cos_difference(edges[k], edges[k + 1])
        v[-1] = 1.0
        share = np.diff(np.concatenate([[0.0], mass_fraction(v, slopes[k])]))
        bounds = f_lo[k] + (f_hi[k] - f_lo[k]) * np.concatenate([[0.0], np.cumsum(share)])
        bounds[-1] = f_hi[k]
        new_edges.append(cut)
        new_masses.append(masses[k] * share)
        new_owner.append(np.full(pieces[k], owner[k]))
        new_lo.append(bounds[:-1])
        new_hi.append(bounds[1:])
    out_edges, out_masses = np.concatenate(new_edges), np.concatenate(new_masses)
    if not with_lagrangian:
        return out_edges, out_masses
    return out_edges, out_masses, (np.concatenate(new_owner), np.concatenate(new_lo), np.concatenate(new_hi))


def _advance_edges(rhs, t0: float, t1: float, y0: np.ndarray, rtol: float, atol: float, step: float | None):
    """Integrate the edges' ODE from t0 to t1 by DOP853; (y(t1), steps taken, the step to start the next stretch).

    The controller's step is carried from one stretch between stops (remeshings, snapshots) to the next:
    restarting at every stop with SciPy's initial-step guess and its growth limit of 10 per step cost about
    three steps per stretch where one or two suffice (the error control is the same either way). The step
    carried is the controller's last untruncated proposal (the final step is cut to land on t1).
    """
    solver = DOP853(rhs, t0, y0, t1, rtol=rtol, atol=atol, first_step=None if step is None else min(step, t1 - t0))
    taken, proposal = 0, solver.h_abs
    while solver.status == "running":
        proposal = solver.h_abs
        message = solver.step()
        if solver.status == "failed":
            raise RuntimeError(message)
        taken += 1
    return solver.y, taken, max(proposal, solver.h_abs)


#: most remeshing and snapshot stops one solve may take (a horizon or remesh_every out of scale is refused)
MAX_STOPS = 1_000_000


def solve(
    red: Reduction,
    beta: float,
    times,
    *,
    measure: str = "uniform",
    params: dict | None = None,
    width: float = 0.05,
    depth: float | None = None,
    edges0: np.ndarray | None = None,
    remesh_every: float = 0.25,
    rtol: float = ODE_RTOL,
    atol: float = ODE_ATOL,
    progress: Callable[[float, dict], None] | None = None,
    truncate: bool = False,
    fast: bool = True,
) -> MeanFieldSolution:
    """Move the Lagrangian cells with the mean-field velocity from t = 0 to every time in ``times``.

    ``width`` is the largest initial cell (radians); with ``depth`` the cells are also graded towards
    E1⊥ down to that distance (``graded_edges``; without it the cells are uniform, the family whose
    convergence is measured); ``edges0`` replaces both. Every ``remesh_every`` (and at
    every snapshot) cells wider than SPLIT_FACTOR·width are split (``split_cells``): a cell that
    straddles the finite-β separatrix stretches between two clusters, and splitting keeps its
    density resolved. DOP853 with ``rtol``/``atol`` on the edges' angles, its step carried across the stops
    (``_advance_edges``).
    ``progress(t, info)`` is called at every snapshot (info: cells, field evaluations, steps so far).

    A cell narrower than RESOLVED_WIDTH (contracting clusters shrink their cells exponentially) ends
    what float64 angles can carry: the solve raises ``CellsUnresolved`` as soon as a trial stage asks for
    one (so it may stop a little early), or with ``truncate`` the snapshots from then on are NaN and
    ``info["resolved_until"]`` is the last snapshot reached. ``fast=False`` evaluates the velocity by the plain
    quadrature rule (``softmax_means``), the benchmark's baseline.
    """
    params = dict(params or {})
    times = np.asarray(times, dtype=float)
    if not (beta > 0 and math.isfinite(beta)):
        raise ValueError(f"mean-field reference: beta must be finite and > 0, got {beta}")
    if (
        times.ndim != 1
        or times.size == 0
        or not np.all(np.isfinite(times))
        or times[0] < 0
        or np.any(np.diff(times) < 0)
    ):
        raise ValueError("mean-field reference: times must be finite, ≥ 0 and non-decreasing")
    if not (remesh_every > 0 and math.isfinite(remesh_every)):
        raise ValueError(f"mean-field reference: remesh_every must be finite and > 0, got {remesh_every}")
    if times[-1] / remesh_every + times.size > MAX_STOPS:
        raise ValueError(
            f"mean-field reference: horizon {times[-1]:g} over remesh_every {remesh_every:g} makes more "
            f"than {MAX_STOPS} stops"
        )
    if edges0 is not None:
        edges = np.asarray(edges0, dtype=float)
    elif depth is not None:
        edges = graded_edges(red, width, depth)
    else:
        edges = uniform_edges(red, width)
    check_edges(red, edges)
    initial_edges = edges.copy()
    masses = initial_masses(red, edges, measure, params)
    initial_mass = masses.copy()
    lagrangian = (np.arange(masses.size), np.zeros(masses.size), np.ones(masses.size))
    widest = SPLIT_FACTOR * float(np.max(np.diff(edges)))
    circle = red.geometry == "circle"
    count = [0]

    def rhs_for(current_masses):
        def rhs(_t, y):
            count[0] += 1
            e = np.append(y, y[0] + 2 * np.pi) if circle else np.concatenate([[0.0], y, [np.pi]])
            narrowest = np.min(np.diff(e))
            if not narrowest > 0:
                # a trial stage whose edges crossed: NaN fails the error test, so the step is rejected
                return np.full_like(y, np.nan)
            if narrowest < RESOLVED_WIDTH:
                # conservative: a trial stage below the resolution ends the solve (rejecting it instead let the
                # stepper crawl towards the limit); the solve may so stop a little early, never go on wrongly
                raise CellsUnresolved(
                    f"mean-field reference at β = {beta}: a cell contracted to {narrowest:.2g} rad "
                    f"after t = {t_now:g}, below the float64 resolution of angles "
                    f'({RESOLVED_WIDTH:.2g} rad; docs/mean_field.md, "Limits")'
                )
            return edge_velocity(red, e, current_masses, beta, y, fast=fast)

        return rhs

    stops = np.union1d(times, np.arange(0.0, times[-1], remesh_every))
    recorded = []
    t_now, steps, step = 0.0, 0, None
    for stop in stops:
        if stop > t_now:
            y0 = edges[:-1] if circle else edges[1:-1]
            try:
                y, taken, step = _advance_edges(rhs_for(masses), t_now, float(stop), y0, rtol, atol, step)
            except CellsUnresolved:
                if not truncate:
                    raise
                break
            except RuntimeError as err:
                raise RuntimeError(
                    f"mean-field reference: the edges' ODE failed at β = {beta} between t = {t_now:g} and {stop:g} "
                    f"({err})"
                ) from None
            edges = np.append(y, y[0] + 2 * np.pi) if circle else np.concatenate([[0.0], y, [np.pi]])
            if not np.all(np.diff(edges) > 0):
                raise FloatingPointError(f"mean-field reference: cell edges crossed at β = {beta}, t = {stop:g}")
            steps += taken
            t_now = float(stop)
        edges, masses, lagrangian = split_cells(red, edges, masses, widest, lagrangian)
        for _ in range(int(np.sum(times == stop))):
            recorded.append((edges.copy(), masses.copy(), *(a.copy() for a in lagrangian)))
        if np.any(times == stop) and progress is not None:
            progress(float(stop), {"cells": int(masses.size), "nfev": count[0], "steps": steps})
    if not recorded:
        raise CellsUnresolved(f"mean-field reference at β = {beta}: cells unresolved before the first snapshot")
    resolved_until = float(times[len(recorded) - 1])
    cells = max(r[1].size for r in recorded)
    E = np.full((times.size, cells + 1), np.nan)
    Mass, Lo, Hi = (np.full((times.size, cells), np.nan) for _ in range(3))
    Owner = np.full((times.size, cells), -1, dtype=np.int64)
    for k, (e, m, o, lo, hi) in enumerate(recorded):
        n = m.size
        E[k, : n + 1], Mass[k, :n], Owner[k, :n], Lo[k, :n], Hi[k, :n] = e, m, o, lo, hi
    return MeanFieldSolution(
        red,
        float(beta),
        times,
        initial_edges,
        E,
        Mass,
        Owner,
        Lo,
        Hi,
        evaluations=count[0],
        initial_masses=initial_mass,
        info={
            "steps": steps,
            "nfev": count[0],
            "cells": int(cells),
            "cells_initial": int(initial_edges.size - 1),
            "resolved_until": resolved_until,
        },
    )
