"""Edge collapse on the S² mesh, the coarsening step of ``sphere_remesh.adapt``: an edge (va, vb) becomes one
vertex and the star of the edge the fan of that vertex, the star's mass remapped over the fan (``sphere_remap``).

``sphere_remesh`` picks the candidate edges (edges shorter than ``collapse_ratio`` target lengths and the shortest
edge of every sliver, shortest first); ``_collapse`` tries them in order. The new vertex goes to the edge's
midpoint, else to va, else to vb: the first position whose fan is oriented, no worse shaped than the patch allows
(``COLLAPSE_ASPECT``, the sliver aspect of ``CollapseLimits``) and has no edge that a split would cut again. A patch
touched earlier in the same pass is refused (so every star read is still current), and so is an edge whose ends
share a neighbour other than the two opposite it (the link condition: the collapse would pinch the surface).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from .sphere_remap import _log_normaliser, _remap_patch

#: a collapse may leave triangles up to this aspect ratio even where the patch was better shaped
COLLAPSE_ASPECT = 3.0
#: largest patch (triangles) a collapse may rebuild
_MAX_PATCH = 64


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
