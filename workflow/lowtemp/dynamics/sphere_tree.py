"""The tree of ``sphere_sources``: the mesh's triangles bisected into nodes, and for the nodes that can stand in for
their triangles, weights on tensor Chebyshev points (proxies) that carry the nodes' mass and first two moments
(docs/sphere_mean_field.md, "Triangles aggregated as sources").

**Proxy weights.** A node's weights are W_p = Σ_q w_q L_p(z_q)(1, δ_q, δ_qδ_qᵀ), δ = y − c, over its triangles'
quadrature nodes (L_p the tensor Lagrange basis of proxy p in frame coordinates z), relative to e^{log m_N} so that
no tail underflows. A node whose children hold weights takes theirs through the child's proxies
(W_N += Σ_c W_c L^N_p(z_c)): exact, because the parent's basis is a tensor polynomial of the child's degrees in the
same frame, which the child's interpolation reproduces. Each triangle's rule is the one the exact pass would take at
the largest κ (sub-triangles over which the exponent varies by at most ``variation``), so the aggregated sums use a
rule at least as fine as the exact ones.

**Frames.** A node of radius at most ``FRAME_RADIUS`` whose parent is larger fixes a frame (its centre and two
tangent directions); its whole subtree shares it, which keeps the upward pass exact and the boxes thin along the
normal (a patch of radius r leaves the tangent plane by at most r²/2).

**The interpolation bound.** On a box [mid − h, mid + h] the n-point Chebyshev interpolant of e^{as} errs by at most
xⁿeˣ/(2ⁿ⁻¹n!), x = |a|h, relative to its value at mid (``interpolation_error``); ``tensor_error`` combines the three
axes (``sphere_sources`` says how the pass uses it).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .sphere_levels import MAX_SUBDIVISION
from .sphere_mesh import SUB_RULES, SphereMesh
from .sphere_pieces import _log_area_distance
from .sphere_softmax import TriangleTables

#: most triangles in a leaf
LEAF_SIZE = 16
#: fewest triangles in a node that holds proxies: a node of fewer costs less integrated exactly (7 nodes each)
PROXY_MIN_TRIANGLES = 48
#: Chebyshev points along each tangent axis and along the normal
TANGENT_POINTS, NORMAL_POINTS = 6, 4
PROXIES = TANGENT_POINTS * TANGENT_POINTS * NORMAL_POINTS
#: largest radius (rad) of a node that fixes its subtree's frame
FRAME_RADIUS = 0.15
#: a triangle needing more sub-triangles per edge at the batch's largest κ keeps its nodes exact
MAX_SOURCE_SUBDIVISION = 4
_HALF_FLOOR = 1e-14


class SourceTree(NamedTuple):
    """The tree over triangles: ``order`` (triangle,) lists the triangles so that node i holds
    ``order[start[i]:stop[i]]``; ``child`` (node, 2), −1 for a leaf; every node's bounding cap (``centre`` (node,
    3), ``cos_r``, ``sin_r``) and ``log_mass``; its ``frame`` (−1: none) in ``frame_origin`` (frame, 3),
    ``frame_axes`` (frame, 3, 3); its box in frame coordinates (``mid``, ``half``, (node, 3)); ``proxy`` its row of
    ``weights`` (proxy node, PROXIES, 10), −1 for a node without proxies; ``log_rule_mass`` (proxy node,) log of
    the mass its quadrature nodes give, relative to e^{log m}; each triangle's ``rule`` (sub-triangles per edge of
    the anterpolation; 0 where the triangle is not aggregable), the largest κ it was built for, ``kappa_max``, the
    tree's ``depth``, and ``tight_share``, the share of the triangles held by proxy nodes with κ_max·radius ≤ 1 (over
    which the kernel varies by at most e²: its exponent ranges over 2κ sin θ sin r ≤ 2κr): what the pass can hope
    to aggregate."""

    order: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    child: np.ndarray
    centre: np.ndarray
    cos_r: np.ndarray
    sin_r: np.ndarray
    log_mass: np.ndarray
    frame: np.ndarray
    frame_origin: np.ndarray
    frame_axes: np.ndarray
    mid: np.ndarray
    half: np.ndarray
    proxy: np.ndarray
    weights: np.ndarray
    log_rule_mass: np.ndarray
    rule: np.ndarray
    kappa_max: float
    depth: int
    tight_share: float


# ---------------------------------------------------------------------------------------------------------------
# Chebyshev interpolation


def chebyshev_points(n: int) -> np.ndarray:
    """The n Chebyshev points of the first kind on [−1, 1]."""
    return np.cos((2.0 * np.arange(n) + 1.0) * math.pi / (2.0 * n))


TANGENT_NODES, NORMAL_NODES = chebyshev_points(TANGENT_POINTS), chebyshev_points(NORMAL_POINTS)


@njit(cache=True, inline="always")
def lagrange(s, nodes, out):
    """The Lagrange basis on ``nodes`` (Chebyshev points of the first kind, whose barycentric weights are
    (−1)^j sin((2j + 1)π/2n)) at s, into ``out``."""
    n = nodes.size
    total = 0.0
    for j in range(n):
        d = s - nodes[j]
        if d == 0.0:
            for i in range(n):
                out[i] = 0.0
            out[j] = 1.0
            return
        w = math.sin((2 * j + 1) * math.pi / (2 * n)) / d
        out[j] = -w if j % 2 else w
        total += out[j]
    for j in range(n):
        out[j] /= total


@njit(cache=True, inline="always")
def interpolation_error(x, n):
    """(e, M): the bound on the error of n-point Chebyshev interpolation of e^{as} over |s| ≤ h, x = |a|h, relative
    to the value at s = 0, and the factor's largest value e^x."""
    m = math.exp(x)
    return x**n * m / (2.0 ** (n - 1) * math.gamma(n + 1.0)), m


def tensor_error(x: np.ndarray) -> float:
    """ε of the module docstring for x = (x₁, x₂, x₃) (tangent, tangent, normal)."""
    return _tensor_error(float(x[0]), float(x[1]), float(x[2]))


@njit(cache=True, inline="always")
def _tensor_error(x1, x2, x3):
    e1, m1 = interpolation_error(x1, TANGENT_POINTS)
    e2, m2 = interpolation_error(x2, TANGENT_POINTS)
    e3, m3 = interpolation_error(x3, NORMAL_POINTS)
    return e1 * m2 * m3 + (m1 + e1) * e2 * m3 + (m1 + e1) * (m2 + e2) * e3


# ---------------------------------------------------------------------------------------------------------------
# the tree


@njit(cache=True)
def _bisect(centre, radius, log_mass, order, nodes):
    """Recursive bisection of the triangles (their cap centres, along the axis of their largest extent); returns
    (the number of nodes, the tree's depth). Children get larger indices than their parent. ``nodes`` = (start,
    stop, child, centre, radius, log-mass) of every node, filled here."""
    start, stop, child, node_centre, node_radius, node_mass = nodes
    count = 1
    start[0], stop[0] = 0, order.size
    stack = np.empty(64, dtype=np.int64)
    level = np.zeros(stack.size, dtype=np.int64)
    stack[0] = 0
    top = 1
    deepest = 0
    while top:
        top -= 1
        i, depth = stack[top], level[top]
        deepest = max(deepest, depth)
        s, e = start[i], stop[i]
        gx = gy = gz = 0.0
        lo = np.full(3, np.inf)
        hi = np.full(3, -np.inf)
        big = -np.inf
        for a in range(s, e):
            t = order[a]
            gx += centre[t, 0]
            gy += centre[t, 1]
            gz += centre[t, 2]
            big = max(big, log_mass[t])
            for k in range(3):
                lo[k] = min(lo[k], centre[t, k])
                hi[k] = max(hi[k], centre[t, k])
        gn = math.sqrt(gx * gx + gy * gy + gz * gz)
        if gn > 1e-12 * (e - s):
            gx, gy, gz = gx / gn, gy / gn, gz / gn
        else:  # the centres cancel (antipodal triangles): any centre will do, the radius covers the rest
            t = order[s]
            gx, gy, gz = centre[t, 0], centre[t, 1], centre[t, 2]
        node_centre[i, 0], node_centre[i, 1], node_centre[i, 2] = gx, gy, gz
        r, total = 0.0, 0.0
        for a in range(s, e):
            t = order[a]
            cx = gy * centre[t, 2] - gz * centre[t, 1]
            cy = gz * centre[t, 0] - gx * centre[t, 2]
            cz = gx * centre[t, 1] - gy * centre[t, 0]
            dot = gx * centre[t, 0] + gy * centre[t, 1] + gz * centre[t, 2]
            r = max(r, math.atan2(math.sqrt(cx * cx + cy * cy + cz * cz), dot) + radius[t])
            total += math.exp(log_mass[t] - big)
        node_radius[i] = min(r * (1.0 + 1e-12) + 1e-15, math.pi)
        node_mass[i] = big + math.log(total)
        if e - s <= LEAF_SIZE:
            child[i, 0] = child[i, 1] = -1
            continue
        axis = np.argmax(hi - lo)
        values = np.empty(e - s)
        for a in range(s, e):
            values[a - s] = centre[order[a], axis]
        perm = np.argsort(values)
        held = order[s:e].copy()
        for a in range(e - s):
            order[s + a] = held[perm[a]]
        # split at the middle of the extent, so that a contracted cluster stays whole in one child; at the median
        # where that leaves a side empty
        m = s + np.searchsorted(values[perm], 0.5 * (lo[axis] + hi[axis]))
        if m == s or m == e:
            m = s + (e - s) // 2
        if top + 2 > stack.size:  # a tree deeper than the stack: grow it
            stack, level = np.concatenate((stack, stack)), np.concatenate((level, level))
        for c, (cs, ce) in enumerate(((s, m), (m, e))):
            start[count], stop[count] = cs, ce
            child[i, c] = count
            stack[top], level[top] = count, depth + 1
            top += 1
            count += 1
    return count, deepest


def _frames_of(child: np.ndarray, centre: np.ndarray, radius: np.ndarray):
    """(frame of each node, origins (frame, 3), axes (frame, 3, 3)): the largest nodes within ``FRAME_RADIUS`` fix
    one each (rows: two tangent directions, then the centre); their subtrees share it."""
    n = child.shape[0]
    frame = np.full(n, -1, dtype=np.int64)
    origins = []
    for i in range(n):  # parents come before their children
        if frame[i] < 0 and radius[i] <= FRAME_RADIUS:
            frame[i] = len(origins)
            origins.append(centre[i])
        for c in child[i]:
            if c >= 0:
                frame[c] = frame[i]
    origin = np.array(origins).reshape(-1, 3)
    helper = np.where(np.abs(origin[:, :1]) < 0.9, [[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]])
    e1 = np.cross(origin, helper)
    e1 /= np.linalg.norm(e1, axis=1, keepdims=True)
    axes = np.stack([e1, np.cross(origin, e1), origin], axis=1)
    return frame, origin, axes


@njit(cache=True, inline="always")
def _rule_point(points, triangles, t, n, q, sub_bary):
    """Node q of triangle t's n × n rule: (y on S² as x, y, z, 1/|chord point|)."""
    i, j, k = triangles[t, 0], triangles[t, 1], triangles[t, 2]
    l0, l1, l2 = sub_bary[n, q, 0], sub_bary[n, q, 1], sub_bary[n, q, 2]
    px = l0 * points[i, 0] + l1 * points[j, 0] + l2 * points[k, 0]
    py = l0 * points[i, 1] + l1 * points[j, 1] + l2 * points[k, 1]
    pz = l0 * points[i, 2] + l1 * points[j, 2] + l2 * points[k, 2]
    rinv = 1.0 / math.sqrt(px * px + py * py + pz * pz)
    return px * rinv, py * rinv, pz * rinv, rinv


@njit(cache=True)
def _leaf_boxes(mesh, quadrature, index, frames, lo, hi):
    """Every framed node's box (``lo``, ``hi`` in frame coordinates) over its triangles' quadrature nodes:
    leaves from the nodes, parents from their children (children have larger indices). ``quadrature`` = (the
    rules' nodes, weights and counts, normalisers, each triangle's rule), ``index`` = (order, start, stop, child),
    ``frames`` = (each node's frame, origins, axes)."""
    points, _, triangles, _ = mesh
    sub_bary, _, sub_count, _, rule = quadrature
    order, start, stop, child = index
    frame, origin, axes = frames
    for i in range(start.size - 1, -1, -1):
        if frame[i] < 0:
            continue
        f = frame[i]
        for k in range(3):
            lo[i, k], hi[i, k] = np.inf, -np.inf
        if child[i, 0] >= 0:
            for c in child[i]:
                for k in range(3):
                    lo[i, k] = min(lo[i, k], lo[c, k])
                    hi[i, k] = max(hi[i, k], hi[c, k])
            continue
        for a in range(start[i], stop[i]):
            t = order[a]
            n = rule[t]
            for q in range(sub_count[n]):
                yx, yy, yz, _ = _rule_point(points, triangles, t, n, q, sub_bary)
                dx, dy, dz = yx - origin[f, 0], yy - origin[f, 1], yz - origin[f, 2]
                for k in range(3):
                    z = axes[f, k, 0] * dx + axes[f, k, 1] * dy + axes[f, k, 2] * dz
                    lo[i, k] = min(lo[i, k], z)
                    hi[i, k] = max(hi[i, k], z)


@njit(cache=True)
def _anterpolate(i, c, tree_arrays, mesh, quadrature, out):
    """Add node c's triangles' quadrature nodes to node i's proxy weights ``out`` (PROXIES, 10), relative to
    e^{log m_i}; ``quadrature`` as ``_leaf_boxes``'."""
    sub_bary, sub_weights, sub_count, log_c, rule = quadrature
    order, start, stop, frame, origin, axes, mid, half, log_mass = tree_arrays
    points, log_density, triangles, _ = mesh
    f = frame[i]
    l1, l2, l3 = np.empty(TANGENT_POINTS), np.empty(TANGENT_POINTS), np.empty(NORMAL_POINTS)
    inner, plane = np.empty(NORMAL_POINTS * 10), np.empty(TANGENT_POINTS * NORMAL_POINTS * 10)
    flat = out.reshape(PROXIES * 10)
    for a in range(start[c], stop[c]):
        t = order[a]
        n = rule[t]
        u, v, w = triangles[t, 0], triangles[t, 1], triangles[t, 2]
        log_geom = (
            _log_area_distance(
                (points[u, 0], points[u, 1], points[u, 2]),
                (points[v, 0], points[v, 1], points[v, 2]),
                (points[w, 0], points[w, 1], points[w, 2]),
            )
            + log_c[t]
            - log_mass[i]
        )
        for q in range(sub_count[n]):
            yx, yy, yz, rinv = _rule_point(points, triangles, t, n, q, sub_bary)
            b0, b1, b2 = sub_bary[n, q, 0], sub_bary[n, q, 1], sub_bary[n, q, 2]
            ell = b0 * log_density[u] + b1 * log_density[v] + b2 * log_density[w]
            weight = sub_weights[n, q] * rinv * rinv * rinv * math.exp(ell + log_geom)
            dx, dy, dz = yx - origin[f, 0], yy - origin[f, 1], yz - origin[f, 2]
            z0 = axes[f, 0, 0] * dx + axes[f, 0, 1] * dy + axes[f, 0, 2] * dz
            z1 = axes[f, 1, 0] * dx + axes[f, 1, 1] * dy + axes[f, 1, 2] * dz
            z2 = axes[f, 2, 0] * dx + axes[f, 2, 1] * dy + axes[f, 2, 2] * dz
            lagrange((z0 - mid[i, 0]) / half[i, 0], TANGENT_NODES, l1)
            lagrange((z1 - mid[i, 1]) / half[i, 1], TANGENT_NODES, l2)
            lagrange((z2 - mid[i, 2]) / half[i, 2], NORMAL_NODES, l3)
            moments = (weight, weight * dx, weight * dy, weight * dz, weight * dx * dx, weight * dx * dy,
                       weight * dx * dz, weight * dy * dy, weight * dy * dz, weight * dz * dz)  # fmt: skip
            # the outer product l1 ⊗ l2 ⊗ l3 ⊗ moments, built axis by axis so the last step is one long
            # contiguous update per tangent point
            for j3 in range(NORMAL_POINTS):
                for r in range(10):
                    inner[j3 * 10 + r] = l3[j3] * moments[r]
            for j2 in range(TANGENT_POINTS):
                for b in range(NORMAL_POINTS * 10):
                    plane[j2 * NORMAL_POINTS * 10 + b] = l2[j2] * inner[b]
            for j1 in range(TANGENT_POINTS):
                row = flat[j1 * plane.size : (j1 + 1) * plane.size]
                row += l1[j1] * plane


@njit(cache=True, parallel=True)
def _anterpolate_all(targets, child, proxy, tree_arrays, mesh, quadrature, weights):
    """Every proxy node's weights from the triangles it does not hold through a child's proxies: a leaf's own, and
    each child's that holds none (one node per task: each writes its own row)."""
    for a in prange(targets.size):
        i = targets[a]
        if child[i, 0] < 0:
            _anterpolate(i, i, tree_arrays, mesh, quadrature, weights[proxy[i]])
            continue
        for c in (child[i, 0], child[i, 1]):
            if proxy[c] < 0:
                _anterpolate(i, c, tree_arrays, mesh, quadrature, weights[proxy[i]])


@njit(cache=True)
def _translate(i, c, mid, half, log_mass, child_weights, out):
    """Add child c's proxy weights to node i's (same frame): W_i += e^{log m_c − log m_i} Σ W_c L^i_p(z_c), one axis
    at a time."""
    scale = math.exp(log_mass[c] - log_mass[i])
    mats = []
    for k, nodes in enumerate((TANGENT_NODES, TANGENT_NODES, NORMAL_NODES)):
        m = np.empty((nodes.size, nodes.size))  # m[j_parent, i_child]
        col = np.empty(nodes.size)
        for a in range(nodes.size):
            z = mid[c, k] + half[c, k] * nodes[a]
            lagrange((z - mid[i, k]) / half[i, k], nodes, col)
            for b in range(nodes.size):
                m[b, a] = col[b]
        mats.append(m)
    n1, n2, n3 = TANGENT_POINTS, TANGENT_POINTS, NORMAL_POINTS
    w = child_weights.reshape(n1, n2, n3, 10)
    step1 = np.zeros((n1, n2, n3, 10))
    for j in range(n1):
        for a in range(n1):
            step1[j] += mats[0][j, a] * w[a]
    step2 = np.zeros((n1, n2, n3, 10))
    for j in range(n2):
        for a in range(n2):
            step2[:, j] += mats[1][j, a] * step1[:, a]
    step3 = np.zeros((n1, n2, n3, 10))
    for j in range(n3):
        for a in range(n3):
            step3[:, :, j] += mats[2][j, a] * step2[:, :, a]
    out += scale * step3.reshape(PROXIES, 10)


def build_tree(mesh: SphereMesh, tables: TriangleTables, kappa_max: float, variation: float) -> SourceTree:
    """The tree over ``mesh``'s triangles with every eligible node's proxy weights (module docstring); ``tables``
    the evaluation's (``sphere_softmax._triangle_tables``)."""
    m = mesh.triangles.shape[0]
    log_c = tables.log_c
    radius = np.arccos(np.clip(tables.cos_r, -1.0, 1.0))
    order = np.arange(m, dtype=np.int64)
    size = 2 * m + 1
    start, stop = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
    child = np.empty((size, 2), dtype=np.int64)
    centre, node_radius, log_mass = np.empty((size, 3)), np.empty(size), np.empty(size)
    n, depth = _bisect(tables.centre, radius, mesh.log_mass, order, (start, stop, child, centre, node_radius, log_mass))
    kept = (a[:n] for a in (start, stop, child, centre, node_radius, log_mass))
    start, stop, child, centre, node_radius, log_mass = kept
    frame, origin, axes = _frames_of(child, centre, node_radius)
    # each triangle's rule: the exact pass's at the largest κ (its exponent varies by at most
    # κ·2 sin r_T over the cap, plus ℓ's range)
    spread = kappa_max * 2.0 * tables.sin_r + tables.log_range
    rule = np.minimum(np.ceil(spread / variation), MAX_SUBDIVISION + 1).astype(np.int64).clip(1)
    aggregable = rule <= MAX_SOURCE_SUBDIVISION
    counts = stop - start
    blocked = np.concatenate([[0], np.cumsum(~aggregable[order])])
    eligible = (frame >= 0) & (counts >= PROXY_MIN_TRIANGLES) & (blocked[stop] == blocked[start])
    lo, hi = np.zeros((n, 3)), np.zeros((n, 3))  # unframed nodes keep a box of zeros: never read
    rule = np.where(aggregable, rule, 1)  # only eligible nodes' triangles are read, and theirs are aggregable
    quadrature = (*SUB_RULES, log_c, rule)  # flat: a parallel loop takes no nested tuple
    _leaf_boxes(mesh.arrays(), quadrature, (order, start, stop, child), (frame, origin, axes), lo, hi)
    mid = 0.5 * (lo + hi)
    half = np.maximum(0.5 * (hi - lo), _HALF_FLOOR)
    proxy = np.where(eligible, np.cumsum(eligible) - 1, -1)
    weights = np.zeros((int(eligible.sum()), PROXIES, 10))
    tree_arrays = (order, start, stop, frame, origin, axes, mid, half, log_mass)
    targets = np.flatnonzero(eligible)
    _anterpolate_all(targets, child, proxy, tree_arrays, mesh.arrays(), quadrature, weights)
    for i in targets[::-1]:  # children before parents
        for c in child[i]:
            if c >= 0 and proxy[c] >= 0:
                _translate(i, c, mid, half, log_mass, weights[proxy[c]], weights[proxy[i]])
    cos_r, sin_r = np.cos(node_radius), np.sin(node_radius)
    log_rule_mass = np.log(weights[:, :, 0].sum(axis=1))  # Σ_p L_p = 1: the quadrature weights' sum
    return SourceTree(
        order, start, stop, child, centre, cos_r, sin_r, log_mass, frame, origin, axes, mid, half, proxy, weights,
        log_rule_mass, np.where(aggregable, rule, 0), float(kappa_max), int(depth),
        _tight_share(child, proxy, stop - start, kappa_max * node_radius),
    )  # fmt: skip


def _tight_share(child: np.ndarray, proxy: np.ndarray, counts: np.ndarray, spread: np.ndarray) -> float:
    """The share of the triangles in the largest proxy nodes whose kernel spread κ_max·radius is at most 1."""
    tight = (proxy >= 0) & (spread <= 1.0)
    parent = np.full(child.shape[0], -1)
    inner = child[:, 0] >= 0
    parent[child[inner, 0]] = parent[child[inner, 1]] = np.flatnonzero(inner)
    top = tight & ((parent < 0) | ~tight[np.maximum(parent, 0)])
    return float(counts[top].sum() / counts[0])
