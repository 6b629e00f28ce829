"""ALE remeshing of the Lagrangian sphere mesh: split long edges, flip to Delaunay, collapse short edges and the
short edges of slivers, every operation conservative in its patch.

Why: under the flow the tail is strained anisotropically. A purely Lagrangian triangulation turns into slivers
there, and splitting the long edges alone makes the number of triangles grow exponentially in time; flipping and
collapsing keep the triangles well shaped and their number growing like the area the size field asks to resolve.

Mass remap. Every operation replaces a patch P of old triangles by new triangles covering the same region of S²
(a split: one old triangle by its two halves; a flip: two by two; a collapse: the star of an edge by the fan of
the new vertex). The patch's mass M_P = Σ_{T∈P} m_T is shared out in proportion to the integral of the OLD
reconstruction (``sphere_mesh``: c_T exp(ℓ linear) on the radially projected chord triangle) over each new one:

    m_T' = M_P · I_T' / Σ_T'' I_T'',    I_T' = ∫_T' c_{T(y)} exp(ℓ_lin,T(y)(y)) dΩ(y),

T(y) the old triangle holding y. The I_T' are computed in log space (7-point rule on n × n sub-triangles of T',
every node located in the old patch), so Σ m is unchanged to rounding, a triangle of mass e^{-700} is handled as
any other, and triangles outside every patch keep their log-mass bit for bit. A new vertex takes ℓ from the old
reconstruction at its position (both sides of a split edge averaged in log space).

Operations on disjoint patches are applied in passes (an independent set per pass, chosen greedily: longest edges
first for splits, shortest first for collapses); ``adapt`` runs a few rounds of split, flip, collapse, flip.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numba import njit
from scipy.spatial import cKDTree

from lowtemp.dynamics.sphere_mesh import (
    MAX_SUBDIVISION,
    NORMALISER_VARIATION,
    SUB_RULES,
    SphereMesh,
    _chord_frame,
    _log_integral,
    log_normalisers,
    subdivision,
)

#: split edges longer than this many target lengths
SPLIT_RATIO = 1.5
#: collapse edges shorter than this many target lengths (0: only slivers). Off by default: a contracting cluster
#: must keep its Lagrangian triangles; coarsening it moved W2 to the cluster centres by 75 % at t = 10 in the
#: zero-temperature dry run (benchmarks/sphere_zero_temperature.py --collapse-ratio 0.5), against 5e-4 without
COLLAPSE_RATIO = 0.0
#: a triangle whose aspect ratio (longest edge over the height on it; 2/√3 when equilateral) exceeds this is a
#: sliver: its shortest edge is collapsed
SLIVER_ASPECT = 6.0
#: a collapse may leave triangles up to this aspect ratio even where the patch was better shaped
COLLAPSE_ASPECT = 3.0
#: largest patch (triangles) a collapse may rebuild
_MAX_PATCH = 64
#: a Delaunay flip needs the opposite vertex this far inside the circumcircle (relative), so round-off cannot cycle
_FLIP_MARGIN = 1e-10


class Edges(NamedTuple):
    """Every edge once (``_edges``): its ends a, b as the first triangle t1 runs them (local edge j1 = (v_j1,
    v_j1+1)), and the second triangle t2, which runs it b → a (local edge j2); each (edge,)."""

    a: np.ndarray
    b: np.ndarray
    t1: np.ndarray
    j1: np.ndarray
    t2: np.ndarray
    j2: np.ndarray


class Stars(NamedTuple):
    """Every vertex's star as it was when a pass began, CSR: the triangles around vertex v are
    ``triangles[start[v]:start[v + 1]]`` (start (vertex + 1,))."""

    start: np.ndarray
    triangles: np.ndarray


class CollapseLimits(NamedTuple):
    """What a collapse must respect: the target edge length at every vertex ``size_at`` (vertex,), the split ratio
    (a fan edge longer than split_ratio · target would be split again) and the sliver aspect ratio (the worst shape
    a collapse may keep where the patch was worse)."""

    size_at: np.ndarray
    split_ratio: float
    sliver_aspect: float


class Alive(NamedTuple):
    """Which triangles (triangle,) and vertices (vertex,) a collapse pass has not removed yet."""

    triangles: np.ndarray
    vertices: np.ndarray


# ---------------------------------------------------------------------------------------------------------------
# the old reconstruction on a patch, in log space


@njit(cache=True, inline="always")
def _ray_barycentric(y, a, b, c):
    """Barycentric coordinates on the chord triangle (a, b, c) of the point where the ray through y meets its
    plane (μ = y in the basis a, b, c, normalised to sum 1); all ≥ 0 iff the ray passes through the triangle."""
    d = a[0] * (b[1] * c[2] - b[2] * c[1]) + a[1] * (b[2] * c[0] - b[0] * c[2]) + a[2] * (b[0] * c[1] - b[1] * c[0])
    ma = y[0] * (b[1] * c[2] - b[2] * c[1]) + y[1] * (b[2] * c[0] - b[0] * c[2]) + y[2] * (b[0] * c[1] - b[1] * c[0])
    mb = y[0] * (c[1] * a[2] - c[2] * a[1]) + y[1] * (c[2] * a[0] - c[0] * a[2]) + y[2] * (c[0] * a[1] - c[1] * a[0])
    mc = y[0] * (a[1] * b[2] - a[2] * b[1]) + y[1] * (a[2] * b[0] - a[0] * b[2]) + y[2] * (a[0] * b[1] - a[1] * b[0])
    s = (ma + mb + mc) / d
    if s <= 0.0:  # the ray meets the plane behind the origin: the antipodal side
        return -1.0, -1.0, -1.0
    return ma / (d * s), mb / (d * s), mc / (d * s)


@njit(cache=True)
def _patch_log_density(y, points, log_density, triangles, patch_c, patch, npatch):
    """log ρ of the reconstruction at unit y, from the patch triangle that holds y (the one y is deepest inside:
    a node on a shared edge gets either side's value, which the rule weighs with measure zero). Called at every
    node, so it takes the mesh's arrays one by one: unpacking a ``MeshArrays`` here would count references at
    every node."""
    best, bl0, bl1, bl2, depth = -1, 0.0, 0.0, 0.0, -np.inf
    for k in range(npatch):
        t = patch[k]
        l0, l1, l2 = _ray_barycentric(y, points[triangles[t, 0]], points[triangles[t, 1]], points[triangles[t, 2]])
        inside = min(l0, l1, l2)
        if inside > depth:
            best, bl0, bl1, bl2, depth = k, l0, l1, l2, inside
    t = patch[best]
    i, j, k = triangles[t, 0], triangles[t, 1], triangles[t, 2]
    return patch_c[best] + bl0 * log_density[i] + bl1 * log_density[j] + bl2 * log_density[k]


@njit(cache=True)
def _patch_variation(log_density, triangles, patch_c, patch, npatch):
    """Range of the old log-density over the patch's vertices (both sides of every edge): sets the rule."""
    lo, hi = np.inf, -np.inf
    for k in range(npatch):
        t = patch[k]
        for j in range(3):
            v = patch_c[k] + log_density[triangles[t, j]]
            lo, hi = min(lo, v), max(hi, v)
    return hi - lo


@njit(cache=True)
def _log_integral_on(corners, n, mesh, patch_c, patch, npatch, rules):
    """log I_T': the old reconstruction of the patch (the first ``npatch`` triangles of ``patch``, log c_T
    ``patch_c``) integrated over the new chord triangle ``corners`` = (a, b, c) (3, 3) (module docstring), 7-point
    rule on n × n sub-triangles, summed with a running maximum (log-sum-exp)."""
    sub_bary, sub_weights, sub_count = rules
    points, log_density, triangles, _ = mesh
    a, b, c = corners[0], corners[1], corners[2]
    area, dist = _chord_frame(a, b, c)
    y = np.empty(3)
    top, total = -np.inf, 0.0
    for q in range(sub_count[n]):
        l0, l1, l2 = sub_bary[n, q, 0], sub_bary[n, q, 1], sub_bary[n, q, 2]
        for j in range(3):
            y[j] = l0 * a[j] + l1 * b[j] + l2 * c[j]
        r2 = y[0] * y[0] + y[1] * y[1] + y[2] * y[2]
        y /= math.sqrt(r2)
        term = _patch_log_density(y, points, log_density, triangles, patch_c, patch, npatch)
        term += math.log(sub_weights[n, q]) - 1.5 * math.log(r2)
        if term > top:
            total = total * math.exp(top - term) + 1.0
            top = term
        else:
            total += math.exp(term - top)
    return top + math.log(total * area * dist)


@njit(cache=True)
def _log_normaliser(t, mesh, tolerance, rules):
    """log c_T of one triangle (``sphere_mesh.log_normalisers``), computed where an operation needs it."""
    points, log_density, triangles, log_mass = mesh
    sub_bary, sub_weights, sub_count = rules
    i, j, k = triangles[t, 0], triangles[t, 1], triangles[t, 2]
    la, lb, lc = log_density[i], log_density[j], log_density[k]
    n = min(subdivision(max(la, lb, lc) - min(la, lb, lc), tolerance), MAX_SUBDIVISION)
    ell = (la, lb, lc)
    return log_mass[t] - _log_integral(points[i], points[j], points[k], ell, n, sub_bary, sub_weights, sub_count)


@njit(cache=True)
def _remap_patch(mesh, patch, npatch, corners, count, out, tolerance, rules):
    """log m of the ``count`` new triangles ``corners`` (new, vertex, 3) that replace the ``npatch`` old triangles
    ``patch``: the patch's mass in proportion to each one's integral of the old reconstruction (module docstring);
    written to ``out``. The two counts are integers, not read off the arrays: a split and a flip pass them as
    constants, for which numba compiles (and unrolls) a version of its own."""
    _, log_density, triangles, log_mass = mesh
    patch_c = np.empty(npatch)
    for k in range(npatch):
        patch_c[k] = _log_normaliser(patch[k], mesh, tolerance, rules)
    n = min(subdivision(_patch_variation(log_density, triangles, patch_c, patch, npatch), tolerance), MAX_SUBDIVISION)
    if npatch > 1:
        n = max(n, 2)  # the old reconstruction has kinks across the new triangles
    top = -np.inf
    for k in range(npatch):
        top = max(top, log_mass[patch[k]])
    mass = 0.0
    for k in range(npatch):
        mass += math.exp(log_mass[patch[k]] - top)
    log_patch_mass = top + math.log(mass)
    for i in range(count):
        out[i] = _log_integral_on(corners[i], n, mesh, patch_c, patch, npatch, rules)
    top = -np.inf
    for i in range(count):
        top = max(top, out[i])
    norm = 0.0
    for i in range(count):
        norm += math.exp(out[i] - top)
    norm = top + math.log(norm)
    for i in range(count):
        out[i] = log_patch_mass + (out[i] - norm)


# ---------------------------------------------------------------------------------------------------------------
# chord-triangle shape


@njit(cache=True, inline="always")
def _shape(a, b, c):
    """Orientation ((b − a) × (c − a))·(a + b + c) and aspect ratio (longest edge²/(2·area)) of a chord triangle."""
    e1 = b - a
    e2 = c - a
    nx = e1[1] * e2[2] - e1[2] * e2[1]
    ny = e1[2] * e2[0] - e1[0] * e2[2]
    nz = e1[0] * e2[1] - e1[1] * e2[0]
    orient = nx * (a[0] + b[0] + c[0]) + ny * (a[1] + b[1] + c[1]) + nz * (a[2] + b[2] + c[2])
    twice_area = math.sqrt(nx * nx + ny * ny + nz * nz)
    longest = max(np.sum(e1 * e1), np.sum(e2 * e2), np.sum((c - b) * (c - b)))
    if twice_area == 0.0:
        return orient, np.inf
    return orient, longest / twice_area


def aspect_ratios(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """Longest edge over the height on it, per chord triangle (2/√3 ≈ 1.155 for an equilateral one)."""
    a, b, c = (points[triangles[:, k]] for k in range(3))
    longest = np.max(np.stack([np.sum((b - a) ** 2, 1), np.sum((c - b) ** 2, 1), np.sum((a - c) ** 2, 1)]), axis=0)
    return longest / np.linalg.norm(np.cross(b - a, c - a), axis=1)


# ---------------------------------------------------------------------------------------------------------------
# split, flip


@njit(cache=True)
def _independent(order, t1, t2, ntri):
    """Greedy independent set of edges (in ``order``) whose two triangles no earlier chosen edge touches."""
    used = np.zeros(ntri, dtype=np.bool_)
    chosen = np.empty(order.size, dtype=np.int64)
    k = 0
    for e in order:
        if not used[t1[e]] and not used[t2[e]]:
            used[t1[e]] = used[t2[e]] = True
            chosen[k] = e
            k += 1
    return chosen[:k]


@njit(cache=True)
def _split(chosen, edges, mesh, nv, nt, tolerance, rules):
    """Split every chosen edge at its great-circle midpoint; each of its two triangles becomes two halves sharing
    that triangle's mass. The mesh's arrays have room for the new vertices (from nv) and triangles (from nt)."""
    _, _, t1, j1, t2, j2 = edges
    points, log_density, triangles, log_mass = mesh
    corners = np.empty((2, 3, 3))
    out = np.empty(2)
    patch = np.empty(1, dtype=np.int64)
    for e in chosen:
        a, b = triangles[t1[e], j1[e]], triangles[t1[e], (j1[e] + 1) % 3]
        mid = points[a] + points[b]
        points[nv] = mid / math.sqrt(np.sum(mid * mid))
        # the chord midpoint has λ = (½, ½, 0) on either side; average the two sides' log ρ there
        c1 = _log_normaliser(t1[e], mesh, tolerance, rules)
        c2 = _log_normaliser(t2[e], mesh, tolerance, rules)
        log_density[nv] = 0.5 * (log_density[a] + log_density[b]) + 0.5 * (c1 + c2)
        for side in range(2):
            t, j = (t1[e], j1[e]) if side == 0 else (t2[e], j2[e])
            p, q, r = triangles[t, j], triangles[t, (j + 1) % 3], triangles[t, (j + 2) % 3]
            corners[0, 0], corners[0, 1], corners[0, 2] = points[p], points[nv], points[r]
            corners[1, 0], corners[1, 1], corners[1, 2] = points[nv], points[q], points[r]
            patch[0] = t
            _remap_patch(mesh, patch, 1, corners, 2, out, tolerance, rules)
            triangles[t, 0], triangles[t, 1], triangles[t, 2] = p, nv, r
            triangles[nt, 0], triangles[nt, 1], triangles[nt, 2] = nv, q, r
            log_mass[t], log_mass[nt] = out[0], out[1]
            nt += 1
        nv += 1
    return nv, nt


@njit(cache=True)
def _flip(chosen, edges, mesh, tolerance, rules):
    """Flip every chosen edge: (a, b, c), (b, a, d) → (a, d, c), (d, b, c), the pair's mass remapped."""
    _, _, t1, j1, t2, j2 = edges
    points, _, triangles, log_mass = mesh
    corners = np.empty((2, 3, 3))
    out = np.empty(2)
    patch = np.empty(2, dtype=np.int64)
    for e in chosen:
        s, u = t1[e], t2[e]
        a, b, c = triangles[s, j1[e]], triangles[s, (j1[e] + 1) % 3], triangles[s, (j1[e] + 2) % 3]
        d = triangles[u, (j2[e] + 2) % 3]
        corners[0, 0], corners[0, 1], corners[0, 2] = points[a], points[d], points[c]
        corners[1, 0], corners[1, 1], corners[1, 2] = points[d], points[b], points[c]
        patch[0], patch[1] = s, u
        _remap_patch(mesh, patch, 2, corners, 2, out, tolerance, rules)
        triangles[s, 0], triangles[s, 1], triangles[s, 2] = a, d, c
        triangles[u, 0], triangles[u, 1], triangles[u, 2] = d, b, c
        log_mass[s], log_mass[u] = out[0], out[1]


# ---------------------------------------------------------------------------------------------------------------
# collapse


@njit(cache=True, inline="always")
def _holds(triangles, t, v):
    return triangles[t, 0] == v or triangles[t, 1] == v or triangles[t, 2] == v


@njit(cache=True)
def _adjacent(v, w, stars, triangles):
    """Whether vertex w lies on a triangle of v's star (the star as it was when the pass began)."""
    star_start, star = stars
    for s in range(star_start[v], star_start[v + 1]):
        if _holds(triangles, star[s], w):
            return True
    return False


@njit(cache=True)
def _collapse(cand_a, cand_b, stars, limits, mesh, alive, tolerance, rules):
    """Collapse the candidate edges (va, vb) in order, each into one vertex (at the midpoint, else at va, else at
    vb: the first position that passes), rebuilding the star of the edge as the fan of the new vertex. Refused:
    a patch touched earlier in this pass (so every star read is still current), the link condition broken (a
    vertex adjacent to both ends other than the two opposite the edge: the collapse would pinch the surface), a
    fan triangle inverted or worse shaped than the patch allows, or a fan edge that a split would cut again."""
    star_start, star = stars
    size_at, split_ratio, sliver_aspect = limits
    points, log_density, triangles, log_mass = mesh
    alive_t, alive_v = alive
    locked = np.zeros(triangles.shape[0], dtype=np.bool_)
    patch = np.empty(_MAX_PATCH, dtype=np.int64)
    rest = np.empty(_MAX_PATCH, dtype=np.int64)
    both = np.empty(2, dtype=np.int64)
    corners = np.empty((_MAX_PATCH, 3, 3))
    out = np.empty(_MAX_PATCH)
    done = 0
    for k in range(cand_a.size):
        va, vb = cand_a[k], cand_b[k]
        if not (alive_v[va] and alive_v[vb]):
            continue
        if star_start[va + 1] - star_start[va] + star_start[vb + 1] - star_start[vb] - 2 > _MAX_PATCH:
            continue
        npatch = nrest = nboth = 0
        free = True
        for s in range(star_start[va], star_start[va + 1]):
            t = star[s]
            free = free and not locked[t]
            patch[npatch] = t
            npatch += 1
            if _holds(triangles, t, vb):
                if nboth < 2:
                    both[nboth] = t
                nboth += 1
            else:
                rest[nrest] = t
                nrest += 1
        if not free or nboth != 2:
            continue
        # link condition: in star(va) minus the edge's two triangles, each link vertex of va appears twice, the
        # two opposite the edge once; so the vertices adjacent to vb are counted exactly twice iff no other is
        shared = 0
        for i in range(nrest):
            for j in range(3):
                w = triangles[rest[i], j]
                if w != va and _adjacent(vb, w, stars, triangles):
                    shared += 1
        if shared != 2:
            continue
        for s in range(star_start[vb], star_start[vb + 1]):
            t = star[s]
            free = free and not locked[t]
            if not _holds(triangles, t, va):
                patch[npatch] = t
                rest[nrest] = t
                npatch += 1
                nrest += 1
        if not free:
            continue
        old_worst = 0.0
        for i in range(npatch):
            t = patch[i]
            old_worst = max(
                old_worst, _shape(points[triangles[t, 0]], points[triangles[t, 1]], points[triangles[t, 2]])[1]
            )
        allowed = max(min(old_worst, sliver_aspect), COLLAPSE_ASPECT)
        size_new = 0.5 * (size_at[va] + size_at[vb])
        accepted = False
        for option in range(3):
            if option == 0:
                x = points[va] + points[vb]
                x = x / math.sqrt(np.sum(x * x))
                c1 = _log_normaliser(both[0], mesh, tolerance, rules)
                c2 = _log_normaliser(both[1], mesh, tolerance, rules)
                l_new = 0.5 * (log_density[va] + log_density[vb]) + 0.5 * (c1 + c2)
            elif option == 1:
                x, l_new = points[va].copy(), log_density[va]
            else:
                x, l_new = points[vb].copy(), log_density[vb]
            worst, fits = 0.0, True
            for i in range(nrest):
                t = rest[i]
                for j in range(3):
                    w = triangles[t, j]
                    if w == va or w == vb:
                        corners[i, j] = x
                    else:
                        corners[i, j] = points[w]
                        chord = math.sqrt(np.sum((points[w] - x) ** 2))
                        fits = fits and chord <= split_ratio * 0.5 * (size_new + size_at[w])
                orient, aspect = _shape(corners[i, 0], corners[i, 1], corners[i, 2])
                fits = fits and orient > 0.0
                worst = max(worst, aspect)
            if fits and (worst <= allowed or worst <= 0.5 * old_worst):
                accepted = True
                break
        if not accepted:
            continue
        _remap_patch(mesh, patch, npatch, corners, nrest, out, tolerance, rules)
        points[va] = x
        log_density[va] = l_new
        for i in range(nrest):
            t = rest[i]
            for j in range(3):
                if triangles[t, j] == vb:
                    triangles[t, j] = va
            log_mass[t] = out[i]
        alive_t[both[0]] = alive_t[both[1]] = False
        alive_v[vb] = False
        for i in range(npatch):
            locked[patch[i]] = True
        done += 1
    return done


# ---------------------------------------------------------------------------------------------------------------
# passes


def _edges(triangles: np.ndarray, n_vertices: int) -> Edges:
    """Every edge once: its ends (a, b) as the first triangle t1 runs them (local edge j1 = (v_j1, v_j1+1)), and
    the second triangle t2 (which runs it b → a, local edge j2)."""
    m = triangles.shape[0]
    a = triangles.ravel()
    b = triangles[:, [1, 2, 0]].ravel()
    key = np.minimum(a, b) * np.int64(n_vertices) + np.maximum(a, b)
    order = np.argsort(key, kind="stable")
    if m == 0 or key.size % 2 or np.any(key[order[0::2]] != key[order[1::2]]):
        raise ValueError("sphere remesh: the triangles do not form a closed 2-manifold")
    first, second = order[0::2], order[1::2]
    return Edges(a[first], b[first], first // 3, first % 3, second // 3, second % 3)


def _arc(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.arctan2(np.linalg.norm(np.cross(p, q), axis=1), np.einsum("ij,ij->i", p, q))


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _split_pass(mesh: SphereMesh, size, ratio: float, tolerance: float) -> int:
    P, F = mesh.points, mesh.triangles
    edges = _edges(F, P.shape[0])
    a, b, t1, _, t2, _ = edges
    length = _arc(P[a], P[b])
    long = np.flatnonzero(length > ratio * size(_unit(P[a] + P[b])))
    chosen = _independent(long[np.argsort(-length[long], kind="stable")], t1, t2, F.shape[0])
    if chosen.size == 0:
        return 0
    nv, nt, k = P.shape[0], F.shape[0], chosen.size
    mesh.points = np.concatenate([P, np.empty((k, 3))])
    mesh.log_density = np.concatenate([mesh.log_density, np.empty(k)])
    mesh.triangles = np.concatenate([F, np.empty((2 * k, 3), dtype=np.int64)])
    mesh.log_mass = np.concatenate([mesh.log_mass, np.empty(2 * k)])
    _split(chosen, edges, mesh.arrays(), nv, nt, tolerance, SUB_RULES)
    return k


def _flip_pass(mesh: SphereMesh, tolerance: float) -> int:
    P, F = mesh.points, mesh.triangles
    edges = _edges(F, P.shape[0])
    a, b, t1, j1, t2, j2 = edges
    c, d = F[t1, (j1 + 2) % 3], F[t2, (j2 + 2) % 3]
    # Delaunay on S²: the plane of (a, b, c) cuts the sphere along its circumcircle, the cap beyond it (away from
    # the origin) is the circumdisc; d inside it iff ((b − a) × (c − a))·(d − a) > 0
    normal = np.cross(P[b] - P[a], P[c] - P[a])
    reach = P[d] - P[a]
    inside = np.einsum("ij,ij->i", normal, reach)
    inside /= np.linalg.norm(normal, axis=1) * np.linalg.norm(reach, axis=1)
    degree = np.bincount(F.ravel(), minlength=P.shape[0])
    new1, new2 = np.stack([a, d, c], axis=1), np.stack([d, b, c], axis=1)
    ok = (inside > _FLIP_MARGIN) & (degree[a] > 3) & (degree[b] > 3)
    ok &= (_orientation(P, new1) > 0) & (_orientation(P, new2) > 0)
    cand = np.flatnonzero(ok)
    chosen = _independent(cand[np.argsort(-inside[cand], kind="stable")], t1, t2, F.shape[0])
    if chosen.size:
        _flip(chosen, edges, mesh.arrays(), tolerance, SUB_RULES)
    return chosen.size


def _orientation(points, triangles):
    a, b, c = (points[triangles[:, k]] for k in range(3))
    return np.einsum("ij,ij->i", np.cross(b - a, c - a), a + b + c)


def _collapse_pass(mesh: SphereMesh, size, collapse_ratio, split_ratio, sliver_aspect, tolerance) -> int:
    P, F = mesh.points, mesh.triangles
    nv, nt = P.shape[0], F.shape[0]
    a, b, t1, j1, _, _ = _edges(F, nv)
    length = _arc(P[a], P[b])
    short = length < collapse_ratio * size(_unit(P[a] + P[b]))
    # the shortest edge of every sliver
    chord = np.stack([np.linalg.norm(P[F[:, (k + 1) % 3]] - P[F[:, k]], axis=1) for k in range(3)], axis=1)
    slivers = np.flatnonzero(aspect_ratios(P, F) > sliver_aspect)
    j = np.argmin(chord[slivers], axis=1)
    sa, sb = F[slivers, j], F[slivers, (j + 1) % 3]
    key = np.concatenate([np.minimum(a[short], b[short]) * nv + np.maximum(a[short], b[short]),
                          np.minimum(sa, sb) * nv + np.maximum(sa, sb)])  # fmt: skip
    key = np.unique(key)
    if key.size == 0:
        return 0
    ca, cb = key // nv, key % nv
    order = np.argsort(_arc(P[ca], P[cb]), kind="stable")
    ca, cb = ca[order], cb[order]
    flat = F.ravel()
    by_vertex = np.argsort(flat, kind="stable")
    star = by_vertex // 3
    star_start = np.searchsorted(flat[by_vertex], np.arange(nv + 1))
    alive_t, alive_v = np.ones(nt, dtype=bool), np.ones(nv, dtype=bool)
    limits = CollapseLimits(np.asarray(size(P), dtype=float), split_ratio, sliver_aspect)
    stars, alive = Stars(star_start, star), Alive(alive_t, alive_v)
    done = _collapse(ca, cb, stars, limits, mesh.arrays(), alive, tolerance, SUB_RULES)
    if done:
        renumber = np.cumsum(alive_v) - 1
        mesh.points, mesh.log_density = P[alive_v], mesh.log_density[alive_v]
        mesh.triangles, mesh.log_mass = renumber[F[alive_t]], mesh.log_mass[alive_t]
    return int(done)


def _size_function(size) -> Callable[[np.ndarray], np.ndarray]:
    if callable(size):
        return lambda x: np.broadcast_to(np.asarray(size(x), dtype=float), x.shape[:-1])
    h = float(size)
    if not h > 0:
        raise ValueError(f"sphere remesh: the target edge length must be positive, got {size!r}")
    return lambda x: np.full(x.shape[:-1], h)


def adapt(
    mesh: SphereMesh,
    size: Callable[[np.ndarray], np.ndarray] | float,
    *,
    split_ratio: float = SPLIT_RATIO,
    collapse_ratio: float = COLLAPSE_RATIO,
    sliver_aspect: float = SLIVER_ASPECT,
    flip: bool = True,
    collapse: bool = True,
    rounds: int = 4,
    max_passes: int = 30,
    tolerance: float = NORMALISER_VARIATION,
) -> tuple[SphereMesh, dict]:
    """Adapt the mesh to the target edge length ``size`` (radians; a number, or a function of unit vectors
    (…, 3) → (…)): rounds of split (edges longer than split_ratio·size), Delaunay flips, collapses (edges shorter
    than collapse_ratio·size and the shortest edge of every triangle of aspect ratio above sliver_aspect), flips;
    every operation conservative in its patch (module docstring). ``flip=False, collapse=False`` is split-only
    refinement. Returns the new mesh (the input is not modified) and counts: splits, flips, collapses,
    triangles_before, triangles_after, worst_aspect (longest edge over its height, after)."""
    if split_ratio <= 2.0 * collapse_ratio:
        raise ValueError("sphere remesh: split_ratio must exceed twice collapse_ratio, or halves would collapse")
    size_of = _size_function(size)
    work = mesh.copy()
    stats = {"splits": 0, "flips": 0, "collapses": 0, "triangles_before": int(mesh.triangles.shape[0])}

    def repeat(step, key):
        total = 0
        for _ in range(max_passes):
            done = step()
            total += done
            if done == 0:
                break
        stats[key] += total
        return total

    for _ in range(rounds):
        split = repeat(lambda: _split_pass(work, size_of, split_ratio, tolerance), "splits")
        if flip:
            repeat(lambda: _flip_pass(work, tolerance), "flips")
        collapsed = 0
        if collapse:
            collapsed = repeat(
                lambda: _collapse_pass(work, size_of, collapse_ratio, split_ratio, sliver_aspect, tolerance),
                "collapses",
            )
            if flip and collapsed:
                repeat(lambda: _flip_pass(work, tolerance), "flips")
        if split == 0 and collapsed == 0:
            break
    stats["triangles_after"] = int(work.triangles.shape[0])
    stats["worst_aspect"] = float(aspect_ratios(work.points, work.triangles).max())
    return work, stats


# ---------------------------------------------------------------------------------------------------------------
# the reconstruction at arbitrary points


@njit(cache=True)
def _locate(x, points, triangles, candidates, out_t, out_bary):
    """For each point, the candidate triangle it is deepest inside (largest smallest barycentric coordinate)."""
    depth = np.full(x.shape[0], -np.inf)
    for i in range(x.shape[0]):
        for k in range(candidates.shape[1]):
            t = candidates[i, k]
            l0, l1, l2 = _ray_barycentric(
                x[i], points[triangles[t, 0]], points[triangles[t, 1]], points[triangles[t, 2]]
            )
            inside = min(l0, l1, l2)
            if inside > depth[i]:
                depth[i] = inside
                out_t[i], out_bary[i, 0], out_bary[i, 1], out_bary[i, 2] = t, l0, l1, l2
    return depth


def locate(mesh: SphereMesh, x: np.ndarray, neighbours: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """The triangle holding each unit vector of x (…, 3) and x's barycentric coordinates on its chord triangle
    (of the ray's crossing), shapes (…) and (…, 3): nearest centroids first, every triangle for the rest."""
    x = np.asarray(x, dtype=float)
    flat = _unit(x.reshape(-1, 3))
    P, F = mesh.points, mesh.triangles
    centroids = _unit(P[F].sum(axis=1))
    k = min(neighbours, F.shape[0])
    _, near = cKDTree(centroids).query(flat, k=k)
    t = np.empty(flat.shape[0], dtype=np.int64)
    bary = np.empty((flat.shape[0], 3))
    depth = _locate(flat, P, F, np.asarray(near, dtype=np.int64).reshape(flat.shape[0], k), t, bary)
    missed = np.flatnonzero(depth < -1e-12)
    if missed.size:
        everything = np.broadcast_to(np.arange(F.shape[0]), (missed.size, F.shape[0]))
        tm, bm = np.empty(missed.size, dtype=np.int64), np.empty((missed.size, 3))
        _locate(flat[missed], P, F, np.ascontiguousarray(everything), tm, bm)
        t[missed], bary[missed] = tm, bm
    return t.reshape(x.shape[:-1]), bary.reshape(x.shape)


def log_density_at(mesh: SphereMesh, x: np.ndarray, log_c: np.ndarray | None = None) -> np.ndarray:
    """log ρ of the reconstruction (c_T exp(ℓ linear) of the triangle holding each point) at unit vectors x."""
    if log_c is None:
        log_c = log_normalisers(mesh)
    t, bary = locate(mesh, x)
    return log_c[t] + np.einsum("...k,...k->...", bary, mesh.log_density[mesh.triangles[t]])


def reconstruction_log_integrals(
    mesh: SphereMesh, patch: np.ndarray, corners: np.ndarray, n: int, log_c: np.ndarray | None = None
) -> np.ndarray:
    """log ∫ over each chord triangle ``corners`` (new, 3 vertices, 3) of the reconstruction restricted to the old
    triangles ``patch`` (which must cover them), n × n sub-triangles: the raw integrals that ``adapt`` scales to
    the patch's mass."""
    if log_c is None:
        log_c = log_normalisers(mesh)
    patch = np.asarray(patch, dtype=np.int64)
    patch_c = np.ascontiguousarray(log_c[patch])
    out = np.empty(corners.shape[0])
    for i in range(corners.shape[0]):
        out[i] = _log_integral_on(corners[i], n, mesh.arrays(), patch_c, patch, patch.size, SUB_RULES)
    return out
