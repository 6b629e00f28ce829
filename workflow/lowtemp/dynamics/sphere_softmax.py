"""The softmax integrals of Eq. 2 over a ``SphereMesh``, in log space, and the mean-field velocity they give.

For a query x with b = Bᵀx, κ = β|b|, b̂ = b/|b| the softmax of ρ is the measure e^{κ⟨b̂, y⟩} ρ(dy)/Z(x). One pass
over the triangles gives log Z, the mean m(x) and the covariance C(x) (moments about b̂, so a kernel of width
κ^{−1/2} ≪ 1 loses nothing to cancellation), hence the velocity v = P_x V m and its surface divergence
div_S v = tr D − xᵀDx − 2 x·Vm with D = β V C Bᵀ (docs/sphere_mean_field.md).

Per query:

* every triangle's bounding cap (centre g_T, radius r_T) bounds its exponent: with θ = ∠(b̂, g_T),
  log m_T + κ cos(max(θ − r_T, 0)) ≥ log ∫_T e^{κ⟨b̂,y⟩} ρ ≥ log m_T + κ cos(min(θ + r_T, π));
* L, the largest lower bound, is a proven lower bound of log Z, raised by following the pieces of the triangle
  whose cap centre sees the largest exponent (``centre_exponent``) towards the integrand's peak
  (``descended_lower``: a triangle much wider than the kernel bounds its own integral hundreds of e-folds too low);
  a triangle whose upper bound lies below L − depth is skipped;
* a kept triangle whose exponent (κ⟨b̂, y⟩ + ℓ) varies by at most ``variation`` over its cap takes the 7-point rule
  once; any other is halved into chord quarters, recursively, until the exponent varies by at most ``variation``
  on each piece (``triangle_sums``), and a piece whose bound, as if it held all of the triangle's area, lies below
  L − depth is skipped: all skipped triangles and pieces together hold less than (triangles)·e^{−depth} of Z, and
  a triangle wider than the kernel costs what the kernel's window inside it costs;
* a triangle or piece whose share of Z is at most e^{−b} has its variation loosened by e^{b/6} (``loosened``, up
  to ``LOOSEST_VARIATION``): the rule's relative error grows like the sixth power of the variation, so its
  absolute error stays below that of a dominant one;
* sums are kept relative to a running maximum of the triangles' upper bounds, so no exponent overflows or
  underflows whatever β and however deep the density lies.

A piece still too varied after ``MAX_HALVINGS`` halvings (``MAX_SUBDIVISION`` pieces per edge) is too coarse for
the kernel: ``MeshTooCoarse`` names the query and the triangle's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .sphere_levels import DEFAULT_DEPTH, DEFAULT_VARIATION, MAX_SUBDIVISION, MeshTooCoarse
from .sphere_mesh import (
    RULE_BARY,
    RULE_WEIGHTS,
    SphereMesh,
    log_normalisers,
)
from .sphere_pieces import PIECE_STACK, _log_area_distance, _scaled, descended_lower, loosened, triangle_sums


@dataclass(frozen=True)
class Softmax:
    """The softmax of every query: ``log_z`` (query,), ``mean`` (query, 3), ``cov`` (query, 3, 3); ``nodes``
    (query,) how many quadrature nodes it took, ``kept`` (query,) how many triangles it integrated, ``bounded``
    (query,) how many triangles it bounded itself (its group's candidates)."""

    log_z: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    nodes: np.ndarray
    kept: np.ndarray
    bounded: np.ndarray


class TriangleTables(NamedTuple):
    """What one evaluation knows of every triangle T before its queries: ``log_c`` = log c_T, the normaliser
    (``sphere_mesh.log_normalisers``) (triangle,); T's bounding cap (``_caps``): its centre g_T (triangle, 3), cos
    and sin of its radius r_T (triangle,), and the range of ℓ over T's vertices ``log_range`` (triangle,); the
    one-piece 7-point rule on T (``_static_nodes``), shared by every query: nodes on S² ``node_y`` (triangle·7, 3)
    and log-weights ``node_lw`` (triangle·7,) = log(rule weight · solid-angle Jacobian) + ℓ + log c_T."""

    log_c: np.ndarray
    centre: np.ndarray
    cos_r: np.ndarray
    sin_r: np.ndarray
    log_range: np.ndarray
    node_y: np.ndarray
    node_lw: np.ndarray


class PassSettings(NamedTuple):
    """How finely one softmax pass integrates: the largest ``variation`` of the exponent κ⟨b̂, y⟩ + ℓ over one
    sub-triangle, and the pruning ``depth`` (e-folds below the proven lower bound L of log Z)."""

    variation: float
    depth: float


class QueryBatch(NamedTuple):
    """The queries of one pass: the kernel's centre b̂ = Bᵀx/|Bᵀx| (query, 3), κ = β|Bᵀx| (query,), and the group
    whose candidate triangles each query integrates (query,)."""

    bhat: np.ndarray
    kappa: np.ndarray
    group: np.ndarray


class Candidates(NamedTuple):
    """Every group's candidate triangles (``_group_fill``), CSR: group g's are ``triangles[offsets[g]:offsets[g +
    1]]``, increasing."""

    offsets: np.ndarray
    triangles: np.ndarray


class QueryGroups(NamedTuple):
    """Groups of queries (``query_groups``): the centre of each group's kernel centres b̂ (group, 3), cos and sin of
    the group's radius R about it (group,), and its smallest and largest κ (group,), both with margins."""

    centre: np.ndarray
    cos_R: np.ndarray
    sin_R: np.ndarray
    kappa_lo: np.ndarray
    kappa_hi: np.ndarray


@njit(cache=True, parallel=True)
def _caps(points, triangles, centre, cos_r, sin_r, log_range, log_density):
    for t in prange(triangles.shape[0]):
        i, j, k = triangles[t, 0], triangles[t, 1], triangles[t, 2]
        gx = points[i, 0] + points[j, 0] + points[k, 0]
        gy = points[i, 1] + points[j, 1] + points[k, 1]
        gz = points[i, 2] + points[j, 2] + points[k, 2]
        gn = math.sqrt(gx * gx + gy * gy + gz * gz)
        gx, gy, gz = gx / gn, gy / gn, gz / gn
        centre[t, 0], centre[t, 1], centre[t, 2] = gx, gy, gz
        c = 1.0
        for v in (i, j, k):
            c = min(c, gx * points[v, 0] + gy * points[v, 1] + gz * points[v, 2])
        # a hair outwards: the bounds must hold for the rounded cap too
        c = min(c, 1.0) - 4e-16
        cos_r[t] = c
        sin_r[t] = math.sqrt(max(0.0, 1.0 - c * c))
        la, lb, lc = log_density[i], log_density[j], log_density[k]
        log_range[t] = max(la, lb, lc) - min(la, lb, lc)


@njit(cache=True, inline="always")
def _cap_cosines(bx, by, bz, gx, gy, gz, cos_r, sin_r):
    """Largest and smallest ⟨b̂, y⟩ over the cap (centre g, radius r)."""
    c = bx * gx + by * gy + bz * gz
    c = min(1.0, max(-1.0, c))
    s = math.sqrt(max(0.0, 1.0 - c * c))
    hi = 1.0 if c >= cos_r else c * cos_r + s * sin_r
    lo = -1.0 if -c >= cos_r else c * cos_r - s * sin_r
    return hi, lo


@njit(cache=True, inline="always")
def centre_exponent(t, query, centre, log_mass):
    """log m_T + κ(⟨b̂, g_T⟩ − 1): triangle t's mass seen at its cap's centre. The triangle where this is largest
    (the first in index order) holds the integrand's peak or lies next to it, and ``descended_lower`` follows its
    pieces there. (The caps' upper bounds do not tell: every triangle whose cap holds b̂ has U_T = log m_T.) It
    lies between T's lower and upper bounds, so it is at least L: every pass keeps that triangle."""
    bx, by, bz, kappa = query
    return log_mass[t] + kappa * (bx * centre[t, 0] + by * centre[t, 1] + bz * centre[t, 2] - 1.0)


@njit(cache=True, parallel=True)
def _static_nodes(mesh, tables, bary, weights):
    """The 7 nodes of the one-piece rule (nodes ``bary``, ``weights``) on every triangle, shared by all queries of
    an evaluation, into ``tables``: positions on the sphere (triangle·7, 3) and log-weights (triangle·7,) =
    log(rule weight · solid-angle Jacobian) + ℓ + log c_T."""
    points, log_density, triangles, _ = mesh
    log_c, node_y, node_lw = tables.log_c, tables.node_y, tables.node_lw
    for t in prange(triangles.shape[0]):
        i, j, k = triangles[t, 0], triangles[t, 1], triangles[t, 2]
        ax, ay, az = points[i, 0], points[i, 1], points[i, 2]
        qx, qy, qz = points[j, 0], points[j, 1], points[j, 2]
        cx, cy, cz = points[k, 0], points[k, 1], points[k, 2]
        log_geom = _log_area_distance((ax, ay, az), (qx, qy, qz), (cx, cy, cz)) + log_c[t]
        la, lb, lc = log_density[i], log_density[j], log_density[k]
        for q in range(7):
            l0, l1, l2 = bary[q, 0], bary[q, 1], bary[q, 2]
            px = l0 * ax + l1 * qx + l2 * cx
            py = l0 * ay + l1 * qy + l2 * cy
            pz = l0 * az + l1 * qz + l2 * cz
            r2 = px * px + py * py + pz * pz
            rinv = 1.0 / math.sqrt(r2)
            node_y[7 * t + q, 0], node_y[7 * t + q, 1], node_y[7 * t + q, 2] = px * rinv, py * rinv, pz * rinv
            node_lw[7 * t + q] = math.log(weights[q] * rinv * rinv * rinv) + l0 * la + l1 * lb + l2 * lc + log_geom


@njit(cache=True)
def _query(bhat, kappa, candidates, mesh, tables, settings, acc):
    """Softmax sums of one query (kernel centre ``bhat`` (3,), ``kappa``) into acc = (S0, S1[3], S2[6], shift, nodes,
    kept, too_coarse); the exponent is κ(⟨b̂, y⟩ − 1) = −κ|y − b̂|²/2, never positive and free of cancellation at the
    kernel's centre. Each kept triangle is integrated by ``triangle_sums``. Only the ``candidates`` (increasing
    triangle indices) are visited: every triangle its group's bounds could not rule out (``_group_fill``), which
    holds every triangle the query itself keeps and the one that sets its lower bound."""
    bx, by, bz = bhat[0], bhat[1], bhat[2]
    log_mass = mesh.log_mass
    centre, cos_r, sin_r, log_range = tables.centre, tables.cos_r, tables.sin_r, tables.log_range
    variation, depth = settings.variation, settings.depth
    upper, spread = np.empty(candidates.size), np.empty(candidates.size)
    lower = -np.inf
    peak, peak_t = -np.inf, -1
    for c in range(candidates.size):
        t = candidates[c]
        hi, lo = _cap_cosines(bx, by, bz, centre[t, 0], centre[t, 1], centre[t, 2], cos_r[t], sin_r[t])
        upper[c] = log_mass[t] + kappa * (hi - 1.0)
        spread[c] = kappa * (hi - lo)
        lower = max(lower, upper[c] - spread[c])
        mid = centre_exponent(t, (bx, by, bz, kappa), centre, log_mass)
        if mid > peak:
            peak, peak_t = mid, t
    pieces = np.empty((PIECE_STACK, 13))
    lower = max(lower, descended_lower(peak_t, (bx, by, bz, kappa), mesh, tables, pieces))
    s = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    half = 0.5 * kappa
    shift = lower
    nodes = 0
    kept = 0
    coarse = -1
    for c in range(candidates.size):
        t = candidates[c]
        if upper[c] < lower - depth:
            continue
        kept += 1
        tolerance = loosened(variation, lower - upper[c])
        if upper[c] > shift:  # rescale what was summed so far to the new shift
            s = _scaled(s, math.exp(shift - upper[c]))
            shift = upper[c]
        kernel = (bx, by, bz, half, shift, lower, depth, variation, tolerance, spread[c] + log_range[t])
        s, used = triangle_sums(s, t, kernel, mesh, tables, pieces)
        if used < 0:
            coarse, used = t, -used
        nodes += used
    for r in range(10):
        acc[r] = s[r]
    acc[10] = shift
    acc[11] = nodes
    acc[12] = kept
    acc[13] = coarse


@njit(cache=True, parallel=True)
def _frames(queries, B, beta, bhat, kappa):
    """b̂ = Bᵀx/|Bᵀx| (query, 3) and κ = β|Bᵀx| (query,) of every query."""
    for s in prange(queries.shape[0]):
        bx = B[0, 0] * queries[s, 0] + B[1, 0] * queries[s, 1] + B[2, 0] * queries[s, 2]
        by = B[0, 1] * queries[s, 0] + B[1, 1] * queries[s, 1] + B[2, 1] * queries[s, 2]
        bz = B[0, 2] * queries[s, 0] + B[1, 2] * queries[s, 1] + B[2, 2] * queries[s, 2]
        norm = math.sqrt(bx * bx + by * by + bz * bz)
        bhat[s, 0], bhat[s, 1], bhat[s, 2] = bx / norm, by / norm, bz / norm
        kappa[s] = beta * norm


@njit(cache=True, inline="always")
def _group(groups, g):
    """Group g of ``groups`` as a tuple of scalars: (centre x, y, z, cos R, sin R, smallest κ, largest κ)."""
    gb, cos_R, sin_R, kappa_lo, kappa_hi = groups
    return gb[g, 0], gb[g, 1], gb[g, 2], cos_R[g], sin_R[g], kappa_lo[g], kappa_hi[g]


@njit(cache=True, inline="always")
def _group_keeps(group, t, centre, cos_r, sin_r, log_mass):
    """(upper bound over the ``group``'s queries (``_group``), lower bound under them) of triangle t's log-share:
    its cap (centre, cos r, sin r) widened by the group's radius R, the upper bound at the group's smallest κ, the
    lower at its largest (both exponents are ≤ 0, so a larger κ lowers them). The triangles' arrays come one by one,
    not as ``TriangleTables``: an inlined call that unpacked a tuple of arrays would count references in the loop."""
    gx, gy, gz, cos_R, sin_R, kappa_lo, kappa_hi = group
    if cos_r[t] + cos_R < 0.0:  # r_t + R > π: the widened cap is the whole sphere
        c = -1.0
    else:
        c = max(-1.0, cos_r[t] * cos_R - sin_r[t] * sin_R - 4e-16)  # cos(r_t + R), a hair outwards
    sn = math.sqrt(max(0.0, 1.0 - c * c))
    hi, lo = _cap_cosines(gx, gy, gz, centre[t, 0], centre[t, 1], centre[t, 2], c, sn)
    return log_mass[t] + kappa_lo * (hi - 1.0), log_mass[t] + kappa_hi * (lo - 1.0)


@njit(cache=True, inline="always")
def _group_lower(group, centre, cos_r, sin_r, log_mass):
    """The largest lower bound under the group's queries: a lower bound of every member's own."""
    lower = -np.inf
    for t in range(centre.shape[0]):
        _, lo = _group_keeps(group, t, centre, cos_r, sin_r, log_mass)
        lower = max(lower, lo)
    return lower


@njit(cache=True, parallel=True)
def _group_counts(groups, tables, log_mass, depth, counts, lowers):
    """How many candidate triangles each group of queries has (``_group_fill``), and the group's lower bound."""
    centre, cos_r, sin_r = tables.centre, tables.cos_r, tables.sin_r
    for g in prange(groups.centre.shape[0]):
        group = _group(groups, g)
        lower = _group_lower(group, centre, cos_r, sin_r, log_mass)
        lowers[g] = lower
        k = 0
        for t in range(centre.shape[0]):
            hi, _ = _group_keeps(group, t, centre, cos_r, sin_r, log_mass)
            if hi >= lower - depth:
                k += 1
        counts[g] = k


@njit(cache=True, parallel=True)
def _group_fill(groups, tables, log_mass, depth, lowers, offsets, out):
    """Per group of queries (centre gb, radius R, κ in [kappa_lo, kappa_hi]) the triangles none of its queries can
    skip, in increasing order: upper bound over the group ≥ (the largest lower bound under it) − depth. A triangle a
    member keeps has its own upper bound ≥ that member's lower bound − depth ≥ the group's lower bound − depth, so it
    is a candidate; so is the triangle that sets a member's lower bound (its upper bound is at least that bound)."""
    centre, cos_r, sin_r = tables.centre, tables.cos_r, tables.sin_r
    for g in prange(groups.centre.shape[0]):
        group = _group(groups, g)
        lower = lowers[g]
        k = offsets[g]
        for t in range(centre.shape[0]):
            hi, _ = _group_keeps(group, t, centre, cos_r, sin_r, log_mass)
            if hi >= lower - depth:
                out[k] = t
                k += 1


@njit(cache=True, parallel=True)
def _softmax_pass(queries, candidates, mesh, tables, settings, out):
    """Every query's row of ``out`` (query, 19): κ, b̂, the sums of ``_query`` and how many candidates it bounded."""
    bhat, kappa, group = queries
    offsets, triangles = candidates
    for s in prange(bhat.shape[0]):
        g = group[s]
        cand = triangles[offsets[g] : offsets[g + 1]]
        acc = np.empty(14)
        _query(bhat[s], kappa[s], cand, mesh, tables, settings, acc)
        out[s, 0] = kappa[s]  # κ, the exponent's shift
        out[s, 1] = bhat[s, 0]
        out[s, 2] = bhat[s, 1]
        out[s, 3] = bhat[s, 2]
        for r in range(14):
            out[s, 4 + r] = acc[r]
        out[s, 18] = cand.size


#: the groups' cells span about this fraction of the pruning window sqrt(2·depth/κ) (at least GROUP_CELL_MIN rad): a
#: larger cell gives fewer groups but widens every member's candidate list by its radius. Where the window is wider
#: than GROUP_CELL_MAX (β = 10: the kernel reaches most of the sphere) there is nothing to prune by groups: one
#: group holds every query
GROUP_FRACTION = 1.5
GROUP_CELL_MIN, GROUP_CELL_MAX = 1e-3, 1.0
#: radius and κ margins of a group: b̂ and κ are the pass's own values, so these only absorb the rounding of the
#: group's centre and radius
_RADIUS_MARGIN, _KAPPA_MARGIN = 1e-9, 1e-12


def query_groups(bhat: np.ndarray, kappa: np.ndarray, depth: float):
    """Groups of queries whose kernel centres b̂ share a cell of a cube map on the sphere (cells about
    ``GROUP_FRACTION`` of the narrowest pruning window): (group of each query, centres (group, 3), cos and sin of
    each group's radius, smallest and largest κ)."""
    nq = bhat.shape[0]
    window = math.sqrt(2.0 * depth / float(kappa.max()))
    if GROUP_FRACTION * window > GROUP_CELL_MAX:
        lo, hi = np.array([kappa.min() * (1 - _KAPPA_MARGIN)]), np.array([kappa.max() * (1 + _KAPPA_MARGIN)])
        return np.zeros(nq, dtype=np.int64), bhat[:1].copy(), np.full(1, -1.0), np.zeros(1), lo, hi
    cell = max(GROUP_CELL_MIN, GROUP_FRACTION * window)
    n = max(1, math.ceil(2.0 / cell))
    axis = np.argmax(np.abs(bhat), axis=1)
    sign = np.take_along_axis(bhat, axis[:, None], 1)[:, 0] >= 0
    major = np.abs(np.take_along_axis(bhat, axis[:, None], 1)[:, 0])
    u = np.take_along_axis(bhat, ((axis + 1) % 3)[:, None], 1)[:, 0] / major
    v = np.take_along_axis(bhat, ((axis + 2) % 3)[:, None], 1)[:, 0] / major
    iu = np.clip(((u + 1.0) * 0.5 * n).astype(np.int64), 0, n - 1)
    iv = np.clip(((v + 1.0) * 0.5 * n).astype(np.int64), 0, n - 1)
    key = ((axis * 2 + sign) * n + iu) * n + iv
    _, group = np.unique(key, return_inverse=True)
    ng = int(group.max()) + 1
    centres = np.zeros((ng, 3))
    np.add.at(centres, group, bhat)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    # the angle of every member from its centre, by atan2 (accurate for tiny and large angles alike)
    cross = np.linalg.norm(np.cross(bhat, centres[group]), axis=1)
    angle = np.arctan2(cross, np.einsum("ij,ij->i", bhat, centres[group]))
    radius = np.zeros(ng)
    np.maximum.at(radius, group, angle)
    radius = np.minimum(radius + _RADIUS_MARGIN, math.pi)
    lo, hi = np.full(ng, np.inf), np.zeros(ng)
    np.minimum.at(lo, group, kappa)
    np.maximum.at(hi, group, kappa)
    return group, centres, np.cos(radius), np.sin(radius), lo * (1 - _KAPPA_MARGIN), hi * (1 + _KAPPA_MARGIN)


def _candidates(groups: QueryGroups, tables: TriangleTables, log_mass: np.ndarray, depth: float) -> Candidates:
    """Every group's candidate triangles (``_group_fill``)."""
    n = groups.centre.shape[0]
    counts, lowers = np.empty(n, dtype=np.int64), np.empty(n)
    _group_counts(groups, tables, log_mass, depth, counts, lowers)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.int64)
    _group_fill(groups, tables, log_mass, depth, lowers, offsets, out)
    return Candidates(offsets, out)


def check_settings(B, beta, variation, depth):
    """B as a float array; ValueError naming the first of B, β, variation, depth out of range."""
    B = np.asarray(B, dtype=float)
    if B.shape != (3, 3) or not np.all(np.isfinite(B)):
        raise ValueError(f"sphere softmax: B must be a finite 3×3 matrix, got shape {B.shape}")
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"sphere softmax: beta must be positive and finite, got {beta!r}")
    if not (math.isfinite(variation) and variation > 0):
        raise ValueError(f"sphere softmax: variation must be positive, got {variation!r}")
    if not (math.isfinite(depth) and depth >= 5):
        raise ValueError(f"sphere softmax: depth must be at least 5 (e-folds), got {depth!r}")
    return B


def softmax(
    mesh: SphereMesh,
    B: np.ndarray,
    beta: float,
    queries: np.ndarray,
    variation: float = DEFAULT_VARIATION,
    depth: float = DEFAULT_DEPTH,
    log_c: np.ndarray | None = None,
    grouped: bool = True,
) -> Softmax:
    """The softmax of ρ (the mesh's density) seen from every query (query, 3): log Z, mean and covariance.

    ``log_c`` are the triangles' normalisers (``sphere_mesh.log_normalisers``), computed when not given. The
    queries are grouped by their kernel centres and each group's bounds rule out triangles for all its members at
    once (``query_groups``); the result is the same, bit for bit, as with ``grouped=False`` (every query bounding
    every triangle), because every triangle a query keeps or takes its lower bound from stays a candidate.
    MeshTooCoarse when a kept triangle needs more than MAX_SUBDIVISION sub-triangles per edge."""
    B = check_settings(B, float(beta), float(variation), float(depth))
    queries = np.ascontiguousarray(queries, dtype=float)
    if queries.ndim != 2 or queries.shape[1] != 3:
        raise ValueError(f"sphere softmax: queries must be (query, 3), got {queries.shape}")
    tables = _triangle_tables(mesh, log_normalisers(mesh) if log_c is None else log_c)
    bhat, kappa = np.empty((queries.shape[0], 3)), np.empty(queries.shape[0])
    _frames(queries, B, float(beta), bhat, kappa)
    if grouped and queries.shape[0]:
        group, *groups = query_groups(bhat, kappa, float(depth))
        candidates = _candidates(QueryGroups(*groups), tables, mesh.log_mass, float(depth))
    else:  # every query bounds every triangle itself
        m = mesh.triangles.shape[0]
        group = np.zeros(queries.shape[0], dtype=np.int64)
        candidates = Candidates(np.array([0, m], dtype=np.int64), np.arange(m, dtype=np.int64))
    out = np.empty((queries.shape[0], 19))
    settings = PassSettings(float(variation), float(depth))
    _softmax_pass(QueryBatch(bhat, kappa, group), candidates, mesh.arrays(), tables, settings, out)
    coarse = out[:, 17]
    if np.any(coarse >= 0):
        s = int(np.argmax(coarse >= 0))
        t = int(coarse[s])
        radius = math.acos(min(1.0, tables.cos_r[t]))
        raise MeshTooCoarse(
            f"sphere softmax: at beta = {beta:g} triangle {t} (cap radius {radius:.3g} rad) "
            f"needs more than {MAX_SUBDIVISION} sub-triangles per edge for query {s} (kernel width "
            f"{out[s, 0] ** -0.5:.3g} rad): refine the mesh"
        )
    return _moments(out)


def _triangle_tables(mesh: SphereMesh, log_c: np.ndarray) -> TriangleTables:
    """Every triangle's normaliser, bounding cap and one-piece nodes (``TriangleTables``)."""
    m = mesh.triangles.shape[0]
    tables = TriangleTables(
        log_c, np.empty((m, 3)), np.empty(m), np.empty(m), np.empty(m), np.empty((7 * m, 3)), np.empty(7 * m)
    )
    _caps(mesh.points, mesh.triangles, tables.centre, tables.cos_r, tables.sin_r, tables.log_range, mesh.log_density)
    _static_nodes(mesh.arrays(), tables, RULE_BARY, RULE_WEIGHTS)
    return tables


def _moments(out: np.ndarray) -> Softmax:
    """log Z, mean and covariance from the pass's sums (moments about b̂)."""
    kappa, bhat, s0 = out[:, 0], out[:, 1:4], out[:, 4]
    first = out[:, 5:8] / s0[:, None]
    second = np.empty((out.shape[0], 3, 3))
    for (i, j), col in zip(((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)), range(8, 14)):
        second[:, i, j] = second[:, j, i] = out[:, col] / s0
    cov = second - first[:, :, None] * first[:, None, :]
    log_z = kappa + out[:, 14] + np.log(s0)
    return Softmax(
        log_z, bhat + first, cov, out[:, 15].astype(np.int64), out[:, 16].astype(np.int64), out[:, 18].astype(np.int64)
    )


def velocity_divergence(x: np.ndarray, sm: Softmax, B: np.ndarray, V: np.ndarray, beta: float):
    """Mean-field velocity v = P_x V m (query, 3) and its surface divergence div_S v (query,) at points x.

    div_S v = tr D − xᵀDx − 2 x·Vm with D = β V C Bᵀ the Jacobian of Vm(x) (docs/sphere_mean_field.md)."""
    vm = sm.mean @ V.T
    v = vm - np.einsum("qi,qi->q", x, vm)[:, None] * x
    D = beta * np.einsum("ij,qjk,lk->qil", V, sm.cov, B)
    div = np.einsum("qii->q", D) - np.einsum("qi,qij,qj->q", x, D, x) - 2.0 * np.einsum("qi,qi->q", x, vm)
    return v, div
