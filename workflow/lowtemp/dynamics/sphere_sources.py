"""Triangles aggregated as sources: a tree over the mesh's triangles whose nodes, where the kernel is smooth enough
over them for a query, stand in for all their triangles by a few weighted points (a treecode that interpolates the
kernel on Chebyshev points; docs/sphere_mean_field.md, "Triangles aggregated as sources").

Why: ``sphere_softmax`` integrates every (query, triangle) pair its bounds keep, and at β = 10 they keep every
pair; the flow crowds most of a late mesh's triangles into the clusters, whose kernel, seen from any query, varies
little over a whole cluster.

**The kernel is separable.** A triangle's softmax integrand is e^{κ(⟨b̂, y⟩ − 1)} ρ(y) times 1, y − b̂ or
(y − b̂)(y − b̂)ᵀ. In an orthonormal frame (rows e₁, e₂, e₃ of E, origin c), y = c + Eᵀz and κ⟨b̂, y⟩ = κ⟨b̂, c⟩ +
Σ_k a_k z_k with a = κEb̂: the kernel is a product of three exponentials e^{a_k z_k}. Interpolated on n_k Chebyshev
points (first kind) over [mid_k − h_k, mid_k + h_k], each factor errs by at most

    e_k = x_k^{n_k} e^{x_k} / (2^{n_k − 1} n_k!),   x_k = |a_k| h_k,

relative to its value at mid_k (the Chebyshev remainder max|f^{(n)}| hⁿ / (2^{n−1} n!)); with M_k = e^{x_k} bounding
the factor itself, the tensor interpolant errs by at most (telescoping f₁f₂f₃ − I₁f₁·I₂f₂·I₃f₃)

    ε = e₁M₂M₃ + (M₁ + e₁)e₂M₃ + (M₁ + e₁)(M₂ + e₂)e₃      times the kernel at the box's centre.

Every quadrature weight is positive, so a node whose quadrature nodes lie in its box and sum to m_N changes S₀ by at
most ε·K(mid)·m_N; the node stands in for its triangles when that is at most ``SOURCE_TOLERANCE``·e^L, L the
query's proven lower bound of log Z, and is opened otherwise. S₁ and S₂ move by at most 2 and 4 times as much.

**The tree** (``sphere_tree``): the triangles bisected into nodes; a node of at least 48 triangles within one
frame holds weights on its Chebyshev points (its proxies) that carry its mass and first two moments, built once per
field evaluation (``sources``), each triangle integrated by a rule at least as fine as the exact pass's.

**Pruning** is the exact pass's, on nodes' caps: a node whose upper bound lies below L − depth is skipped whole.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .sphere_levels import DEFAULT_DEPTH, DEFAULT_VARIATION, MAX_SUBDIVISION, MeshTooCoarse
from .sphere_mesh import MeshArrays, SphereMesh, log_normalisers
from .sphere_pieces import PIECE_STACK, _scaled, descended_lower, loosened, triangle_sums
from .sphere_softmax import (
    PassSettings,
    Softmax,
    TriangleTables,
    _cap_cosines,
    _frames,
    _moments,
    _triangle_tables,
    centre_exponent,
    check_settings,
)
from .sphere_tree import (
    NORMAL_NODES,
    NORMAL_POINTS,
    PROXIES,
    TANGENT_NODES,
    TANGENT_POINTS,
    SourceTree,
    _tensor_error,
    build_tree,
)

#: largest error a node may add to Z, as a share of the query's lower bound of Z
SOURCE_TOLERANCE = 1e-9
#: the share of the triangles in tight nodes (``SourceTree.tight_share``) from which the solver takes this pass
#: over the exact one: `make bench` sets each mesh's share beside the two passes' times
#: (docs/sphere_mean_field_bench.md); below about a fifth the tree's pass costs as much as the exact one or more
WORTHWHILE = 0.25


# ---------------------------------------------------------------------------------------------------------------
# the pass


@njit(cache=True, inline="always")
def _node_bounds(tree, i, bx, by, bz, kappa):
    """(upper, lower) bound of node i's log-share e^{κ(⟨b̂, y⟩ − 1)} over its cap, and the spread κ(hi − lo)."""
    centre, cos_r, sin_r, log_mass = tree.centre, tree.cos_r, tree.sin_r, tree.log_mass
    hi, lo = _cap_cosines(bx, by, bz, centre[i, 0], centre[i, 1], centre[i, 2], cos_r[i], sin_r[i])
    return log_mass[i] + kappa * (hi - 1.0), log_mass[i] + kappa * (lo - 1.0)


@njit(cache=True, inline="always")
def _proxy_sums(tree, i, query, shift, log_tolerance, lower, s):
    """(accepted, sums): node i's proxies added to the ten sums ``s`` when its interpolation error bound is at most
    e^{log_tolerance + lower} (module docstring), else (False, s) unchanged; ``query`` = (b̂x, b̂y, b̂z, κ)."""
    bx, by, bz, kappa = query
    f = tree.frame[i]
    origin, axes, mid, half = tree.frame_origin, tree.frame_axes, tree.mid, tree.half
    a0 = kappa * (axes[f, 0, 0] * bx + axes[f, 0, 1] * by + axes[f, 0, 2] * bz)
    a1 = kappa * (axes[f, 1, 0] * bx + axes[f, 1, 1] * by + axes[f, 1, 2] * bz)
    a2 = kappa * (axes[f, 2, 0] * bx + axes[f, 2, 1] * by + axes[f, 2, 2] * bz)
    eps = _tensor_error(abs(a0) * half[i, 0], abs(a1) * half[i, 1], abs(a2) * half[i, 2])
    # the kernel at the box's centre y_mid = c + Eᵀ mid, as κ(⟨b̂, y_mid⟩ − 1)
    ox, oy, oz = origin[f, 0] - bx, origin[f, 1] - by, origin[f, 2] - bz
    log_k = kappa * (bx * origin[f, 0] + by * origin[f, 1] + bz * origin[f, 2] - 1.0)
    log_k += a0 * mid[i, 0] + a1 * mid[i, 1] + a2 * mid[i, 2]
    # accepted when ε K(mid) m_N ≤ τ e^L, m_N the mass the node's quadrature gives; a NaN or infinite ε (a factor
    # beyond the floating-point range) is refused
    limit = math.exp(min(log_tolerance + lower - log_k - tree.log_mass[i] - tree.log_rule_mass[tree.proxy[i]], 700.0))
    if not (eps <= limit and eps < math.inf):
        return False, s
    f1, f2, f3 = np.empty(TANGENT_POINTS), np.empty(TANGENT_POINTS), np.empty(NORMAL_POINTS)
    for j in range(TANGENT_POINTS):
        f1[j] = math.exp(a0 * half[i, 0] * TANGENT_NODES[j])
        f2[j] = math.exp(a1 * half[i, 1] * TANGENT_NODES[j])
    for j in range(NORMAL_POINTS):
        f3[j] = math.exp(a2 * half[i, 2] * NORMAL_NODES[j])
    w = tree.weights[tree.proxy[i]]
    t = np.zeros(10)
    p = 0
    for j1 in range(TANGENT_POINTS):
        for j2 in range(TANGENT_POINTS):
            k12 = f1[j1] * f2[j2]
            for j3 in range(NORMAL_POINTS):
                k = k12 * f3[j3]
                for r in range(10):
                    t[r] += k * w[p, r]
                p += 1
    scale = math.exp(log_k + tree.log_mass[i] - shift)
    t0, t1, t2, t3 = scale * t[0], scale * t[1], scale * t[2], scale * t[3]
    t4, t5, t6, t7, t8, t9 = scale * t[4], scale * t[5], scale * t[6], scale * t[7], scale * t[8], scale * t[9]
    # moments about the frame's origin c moved to b̂: y − b̂ = δ + (c − b̂)
    return True, (
        s[0] + t0,
        s[1] + t1 + ox * t0,
        s[2] + t2 + oy * t0,
        s[3] + t3 + oz * t0,
        s[4] + t4 + 2.0 * ox * t1 + ox * ox * t0,
        s[5] + t5 + ox * t2 + oy * t1 + ox * oy * t0,
        s[6] + t6 + ox * t3 + oz * t1 + ox * oz * t0,
        s[7] + t7 + 2.0 * oy * t2 + oy * oy * t0,
        s[8] + t8 + oy * t3 + oz * t2 + oy * oz * t0,
        s[9] + t9 + 2.0 * oz * t3 + oz * oz * t0,
    )


@njit(cache=True, inline="always")
def _lower_bound(tree, query, tables, log_mass):
    """(L, nodes visited, the triangle the exact pass descends for a better L): the largest of the triangles' lower
    bounds of log Z by branch and bound (a node whose upper bound is at most the best lower bound found holds no
    better one), and the triangle of the largest ``centre_exponent`` (ties: the smallest index in the mesh's order;
    its node is never pruned, its exponent lying above every lower bound)."""
    bx, by, bz, kappa = query
    centre, cos_r, sin_r = tables.centre, tables.cos_r, tables.sin_r
    lower = -np.inf
    visited = 0
    best, best_mid = -1, -np.inf
    stack = np.empty(tree.depth + 2, dtype=np.int64)  # a depth-first walk holds at most depth + 1 nodes
    stack[0] = 0
    top = 1
    while top:
        top -= 1
        i = stack[top]
        visited += 1
        upper, _ = _node_bounds(tree, i, bx, by, bz, kappa)
        if upper <= lower:
            continue
        c0, c1 = tree.child[i, 0], tree.child[i, 1]
        if c0 >= 0:
            u0, _ = _node_bounds(tree, c0, bx, by, bz, kappa)
            u1, _ = _node_bounds(tree, c1, bx, by, bz, kappa)
            stack[top], stack[top + 1] = (c1, c0) if u0 >= u1 else (c0, c1)
            top += 2
            continue
        for a in range(tree.start[i], tree.stop[i]):
            t = a  # the pass's tables are in tree order
            hi, lo = _cap_cosines(bx, by, bz, centre[t, 0], centre[t, 1], centre[t, 2], cos_r[t], sin_r[t])
            up = log_mass[t] + kappa * (hi - 1.0)
            lower = max(lower, up - kappa * (hi - lo))  # as the exact pass forms it, to the last bit
            mid = centre_exponent(t, query, centre, log_mass)
            if mid > best_mid or (mid == best_mid and tree.order[t] < tree.order[best]):
                best, best_mid = t, mid
        visited += tree.stop[i] - tree.start[i]
    return lower, visited, best


@njit(cache=True)
def _tree_query(bhat, kappa, tree, mesh, tables, settings, log_tolerance, acc):
    """Softmax sums of one query into acc = (S0, S1[3], S2[6], shift, nodes, kept, too_coarse, visited): the exact
    pass's lower bound L first (``_lower_bound``), then a walk down the tree: nodes whose upper bound lies below
    L − depth skipped whole, nodes whose proxies are accurate enough used, leaves integrated triangle by triangle
    as ``sphere_softmax._query`` integrates them (the same L, so the same pruning, sub-division and loosening)."""
    bx, by, bz = bhat[0], bhat[1], bhat[2]
    log_mass = mesh.log_mass
    centre, cos_r, sin_r, log_range = tables.centre, tables.cos_r, tables.sin_r, tables.log_range
    variation, depth = settings.variation, settings.depth
    lower, visited, best = _lower_bound(tree, (bx, by, bz, kappa), tables, log_mass)
    pieces = np.empty((PIECE_STACK, 13))
    lower = max(lower, descended_lower(best, (bx, by, bz, kappa), mesh, tables, pieces))
    s = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    half_kappa = 0.5 * kappa
    shift = lower
    nodes = kept = 0
    coarse = -1
    stack = np.empty(tree.depth + 2, dtype=np.int64)  # a depth-first walk holds at most depth + 1 nodes
    stack[0] = 0
    top = 1
    while top:
        top -= 1
        i = stack[top]
        visited += 1
        upper, _ = _node_bounds(tree, i, bx, by, bz, kappa)
        if upper < lower - depth:
            continue
        if tree.proxy[i] >= 0:
            # the sums' scale rises to a node's bound only where its proxies may be added: a wide node's bound (the
            # root's is its whole mass) can lie 745 e-folds above Z, and every sum would then underflow to 0
            if upper > shift:
                s = _scaled(s, math.exp(shift - upper))
                shift = upper
            used, s = _proxy_sums(tree, i, (bx, by, bz, kappa), shift, log_tolerance, lower, s)
            if used:
                nodes += PROXIES
                kept += 1
                continue
        c0, c1 = tree.child[i, 0], tree.child[i, 1]
        if c0 >= 0:  # the child with the larger upper bound on top: it raises the lower bound first
            u0, _ = _node_bounds(tree, c0, bx, by, bz, kappa)
            u1, _ = _node_bounds(tree, c1, bx, by, bz, kappa)
            first, second = (c1, c0) if u0 >= u1 else (c0, c1)
            stack[top], stack[top + 1] = first, second
            top += 2
            continue
        for a in range(tree.start[i], tree.stop[i]):
            t = a  # the pass's tables are in tree order
            visited += 1
            hi, lo = _cap_cosines(bx, by, bz, centre[t, 0], centre[t, 1], centre[t, 2], cos_r[t], sin_r[t])
            up = log_mass[t] + kappa * (hi - 1.0)
            if up < lower - depth:
                continue
            kept += 1
            tolerance = loosened(variation, lower - up)
            if up > shift:
                s = _scaled(s, math.exp(shift - up))
                shift = up
            spread = kappa * (hi - lo) + log_range[t]
            kernel = (bx, by, bz, half_kappa, shift, lower, depth, variation, tolerance, spread)
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
    acc[14] = visited


@njit(cache=True, parallel=True)
def _tree_pass(bhat, kappa, tree, mesh, tables, settings, log_tolerance, out):
    """Every query's row of ``out`` (query, 19), laid out as ``sphere_softmax._softmax_pass``'s."""
    for s in prange(bhat.shape[0]):
        acc = np.empty(15)
        _tree_query(bhat[s], kappa[s], tree, mesh, tables, settings, log_tolerance, acc)
        out[s, 0] = kappa[s]
        out[s, 1] = bhat[s, 0]
        out[s, 2] = bhat[s, 1]
        out[s, 3] = bhat[s, 2]
        for r in range(14):
            out[s, 4 + r] = acc[r]
        out[s, 18] = acc[14]


class Sources(NamedTuple):
    """What one field evaluation builds once for all its passes: the tree with its proxy weights, and the
    triangles' tables (``sphere_softmax``) and mesh arrays with the triangles in the tree's order, so that a leaf's
    triangles lie together in memory (the pass reads triangle ``a`` of the tree's order as ``a``)."""

    tree: SourceTree
    tables: TriangleTables
    mesh: MeshArrays


def sources(mesh: SphereMesh, B: np.ndarray, beta: float, variation: float = DEFAULT_VARIATION, log_c=None) -> Sources:
    """The tree of ``mesh``'s triangles for any query: each triangle's rule taken at the largest κ a query can have,
    β·σ_max(B)."""
    B = np.asarray(B, dtype=float)
    tables = _triangle_tables(mesh, log_normalisers(mesh) if log_c is None else log_c)
    kappa_max = float(beta) * float(np.linalg.norm(B, 2)) * (1.0 + 1e-12)
    tree = build_tree(mesh, tables, kappa_max, float(variation))
    o = tree.order
    nodes = (7 * o[:, None] + np.arange(7)).ravel()
    ordered = TriangleTables(
        tables.log_c[o], tables.centre[o], tables.cos_r[o], tables.sin_r[o], tables.log_range[o],
        tables.node_y[nodes], tables.node_lw[nodes],
    )  # fmt: skip
    return Sources(tree, ordered, MeshArrays(mesh.points, mesh.log_density, mesh.triangles[o], mesh.log_mass[o]))


def tree_softmax(
    mesh: SphereMesh,
    B: np.ndarray,
    beta: float,
    queries: np.ndarray,
    variation: float = DEFAULT_VARIATION,
    depth: float = DEFAULT_DEPTH,
    log_c: np.ndarray | None = None,
    tolerance: float = SOURCE_TOLERANCE,
    built: Sources | None = None,
) -> Softmax:
    """``sphere_softmax.softmax`` with triangles aggregated as sources (module docstring): the same log Z, mean and
    covariance within the quadrature's error, each node used adding at most ``tolerance`` of Z (``bounded`` counts
    the nodes and triangles a query visited). ``built``: the evaluation's tree (``sources``), built here when not
    given; it must be ``mesh``'s at this β and variation."""
    B = check_settings(B, float(beta), float(variation), float(depth))
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"sphere sources: tolerance must be positive and finite, got {tolerance!r}")
    queries = np.ascontiguousarray(queries, dtype=float)
    if queries.ndim != 2 or queries.shape[1] != 3:
        raise ValueError(f"sphere sources: queries must be (query, 3), got {queries.shape}")
    bhat, kappa = np.empty((queries.shape[0], 3)), np.empty(queries.shape[0])
    _frames(queries, B, float(beta), bhat, kappa)
    out = np.empty((queries.shape[0], 19))
    if queries.shape[0]:
        built = sources(mesh, B, beta, variation, log_c) if built is None else built
        if kappa.max() > built.tree.kappa_max:  # the triangles' rules were chosen for κ up to β·σ_max(B)
            s = int(np.argmax(kappa))
            raise ValueError(
                f"sphere sources: query {s} has κ = {kappa[s]:.6g} above the tree's {built.tree.kappa_max:.6g}: "
                "queries must be unit vectors, and the tree built for this β and B"
            )
        settings = PassSettings(float(variation), float(depth))
        _tree_pass(bhat, kappa, built.tree, built.mesh, built.tables, settings, math.log(tolerance), out)
    coarse = out[:, 17]
    if np.any(coarse >= 0):
        s = int(np.argmax(coarse >= 0))
        t = int(built.tree.order[int(coarse[s])])
        raise MeshTooCoarse(
            f"sphere sources: at beta = {beta:g} triangle {t} needs more than {MAX_SUBDIVISION} "
            f"sub-triangles per edge for query {s} (kernel width {out[s, 0] ** -0.5:.3g} rad): refine the mesh"
        )
    return _moments(out)
