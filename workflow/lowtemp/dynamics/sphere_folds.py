"""Repair of the folds the flow makes in the mesh's near-empty tail: every connected group of inside-out triangles,
with the rings of triangles around it, is replaced by a fresh triangulation of the group's outer boundary; the
region's mass is shared over the new triangles by the old reconstruction's integral (``sphere_remap``, as every
``sphere_remesh`` operation shares a patch's mass), so the total mass is kept to rounding.

Why: a triangle flattened below the ODE's position error can have a vertex carried across its opposite edge; the
mesh then covers that spot three times. Flips and collapses need positively oriented results, so they never act on
a fold, and splitting a fold gives two folds: left alone it is multiplied at every remeshing
(docs/sphere_mean_field.md, "Folds").

The region. Starting from one connected group of inverted triangles (connected through shared vertices), the
region is that group grown by k rings (every triangle sharing a vertex with it), k = 1, 2, … up to ``MAX_RINGS``,
until the region is a topological disk whose outer boundary, seen from the region's centre, is a simple polygon
turning counter-clockwise (gnomonic projection: great circles map to straight lines, so a polygon that is simple
there bounds one spherical polygon and its triangulation by ear clipping has positively oriented chord triangles).
The vertices inside the region are dropped: a fold lies where the density is e^{-20} or less of the mean, and what
the flow did to the tail inside it is not resolved anyway. A group the rings cannot enclose is left as it is (the
solver's fold guard still sees it).
"""

from __future__ import annotations

import math

import numpy as np

from .sphere_geometry import orientation, spherical_area
from .sphere_mesh import NORMALISER_VARIATION, SUB_RULES, SphereMesh, log_normalisers
from .sphere_remap import _remap_patch

#: most rings of triangles a fold's region may grow by before the fold is left unrepaired
MAX_RINGS = 4
#: an ear, and every new triangle, must turn by more than this fraction of its longest edge squared: a triangle on
#: one great circle would pass a bare sign test by rounding and leave a later remap dividing by zero
_DEGENERATE = 1e-12
#: a region's boundary must lie within this angle (radians) of its centre: the gnomonic projection maps the open
#: hemisphere to the plane (its orientation tests are then the sphere's), and stretches by 1/cos of the angle
_MAX_SPREAD = 1.55


def _vertex_groups(mask: np.ndarray, triangles: np.ndarray, n_vertices: int) -> list[np.ndarray]:
    """The triangles of ``mask`` in groups connected through shared vertices (union–find over vertices)."""
    parent = np.arange(n_vertices)

    def find(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    chosen = np.flatnonzero(mask)
    for t in chosen:
        a, b, c = (find(v) for v in triangles[t])
        parent[b] = a
        parent[find(c)] = find(a)
    roots = np.array([find(triangles[t, 0]) for t in chosen], dtype=np.int64)
    return [chosen[roots == r] for r in np.unique(roots)]


def _grow(region: np.ndarray, triangles: np.ndarray, n_vertices: int) -> np.ndarray:
    """The region (boolean over triangles) and every triangle sharing a vertex with it."""
    touched = np.zeros(n_vertices, dtype=bool)
    touched[triangles[region].ravel()] = True
    return touched[triangles].any(axis=1)


def _boundary_loop(region_triangles: np.ndarray) -> np.ndarray | None:
    """The vertices of the region's boundary in the order its triangles run it (counter-clockwise around the region
    seen from outside the sphere), or None unless the region is a disk bounded by one simple loop."""
    directed = np.concatenate([region_triangles[:, [0, 1]], region_triangles[:, [1, 2]], region_triangles[:, [2, 0]]])
    inner = {(int(a), int(b)) for a, b in directed}
    boundary = [(a, b) for a, b in inner if (b, a) not in inner]
    if len(boundary) < 3:
        return None
    following: dict[int, int] = {}
    for a, b in boundary:
        if a in following:  # the region touches itself at a vertex
            return None
        following[a] = b
    start = boundary[0][0]
    loop, v = [start], following[start]
    while v != start and len(loop) <= len(boundary):
        loop.append(v)
        v = following[v]
    if len(loop) != len(boundary):  # several loops: the region has holes
        return None
    vertices = np.unique(region_triangles)
    edges = (len(inner) - len(boundary)) // 2 + len(boundary)  # interior edges run both ways, boundary ones once
    if vertices.size - edges + region_triangles.shape[0] != 1:  # Euler characteristic of a disk
        return None
    return np.array(loop, dtype=np.int64)


def _gnomonic(points: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """Coordinates (…, 2) of unit vectors in the plane tangent at ``centre``, with a right-handed frame, so that
    counter-clockwise seen from outside the sphere is counter-clockwise in the plane."""
    e1 = np.cross(centre, [1.0, 0.0, 0.0] if abs(centre[0]) < 0.9 else [0.0, 1.0, 0.0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(centre, e1)
    scaled = points / (points @ centre)[:, None]
    return np.stack([scaled @ e1, scaled @ e2], axis=1)


def _cross2(o, a, b):
    return (a[..., 0] - o[..., 0]) * (b[..., 1] - o[..., 1]) - (a[..., 1] - o[..., 1]) * (b[..., 0] - o[..., 0])


def _simple(poly: np.ndarray) -> bool:
    """Whether the closed polygon (vertex, 2) has no two non-adjacent edges that meet."""
    n = poly.shape[0]
    a, b = poly, np.roll(poly, -1, axis=0)
    i, j = np.triu_indices(n, k=2)
    keep = ~((i == 0) & (j == n - 1))  # the first and last edges share a vertex
    i, j = i[keep], j[keep]
    d1 = _cross2(a[j], b[j], a[i])
    d2 = _cross2(a[j], b[j], b[i])
    d3 = _cross2(a[i], b[i], a[j])
    d4 = _cross2(a[i], b[i], b[j])
    return not np.any((d1 * d2 <= 0) & (d3 * d4 <= 0))


def _ear_clip(poly: np.ndarray) -> np.ndarray | None:
    """Triangles (index triples into poly) of a simple counter-clockwise polygon, each strictly counter-clockwise
    (turning by more than ``_DEGENERATE`` of the polygon's extent squared); None where no such ear is left."""
    floor = _DEGENERATE * float(np.ptp(poly, axis=0).max()) ** 2
    left = list(range(poly.shape[0]))
    out = []
    while len(left) > 3:
        n = len(left)
        for k in range(n):
            p, q, r = left[k - 1], left[k], left[(k + 1) % n]
            if _cross2(poly[p], poly[q], poly[r]) <= floor:
                continue
            others = [v for v in left if v not in (p, q, r)]
            o = poly[others]
            inside = (_cross2(poly[p], poly[q], o) >= 0) & (_cross2(poly[q], poly[r], o) >= 0)
            inside &= _cross2(poly[r], poly[p], o) >= 0
            if not inside.any():
                out.append((p, q, r))
                del left[k]
                break
        else:
            return None
    if _cross2(poly[left[0]], poly[left[1]], poly[left[2]]) <= floor:
        return None
    out.append(tuple(left))
    return np.array(out, dtype=np.int64)


def _refill(mesh: SphereMesh, region: np.ndarray):
    """(boundary loop, new triangles as vertex triples, their log-masses, the region's angular radius about its
    centre) for the region, or None where the region is not a disk with a simple boundary in its tangent plane, or
    any of its vertices lies farther than ``_MAX_SPREAD`` from the centre."""
    loop = _boundary_loop(mesh.triangles[region])
    if loop is None:
        return None
    ring = mesh.points[loop]
    centre = ring.sum(axis=0)
    if np.linalg.norm(centre) == 0.0:
        return None
    centre /= np.linalg.norm(centre)
    reach = float(np.min(mesh.points[np.unique(mesh.triangles[region])] @ centre))
    if reach < np.cos(_MAX_SPREAD):  # inner vertices too: a region must not swallow the sphere
        return None
    poly = _gnomonic(ring, centre)
    area = 0.5 * np.sum(poly[:, 0] * np.roll(poly[:, 1], -1) - np.roll(poly[:, 0], -1) * poly[:, 1])
    if not area > 0 or not _simple(poly):
        return None
    ears = _ear_clip(poly)
    if ears is None:
        return None
    new = loop[ears]
    longest = np.max([np.sum((mesh.points[new[:, k]] - mesh.points[new[:, k - 1]]) ** 2, axis=1) for k in range(3)], 0)
    if np.any(orientation(mesh.points, new) <= _DEGENERATE * longest):
        return None
    patch = np.flatnonzero(region)
    corners = np.ascontiguousarray(mesh.points[new])
    log_mass = np.empty(new.shape[0])
    _remap_patch(mesh.arrays(), patch, patch.size, corners, new.shape[0], log_mass, NORMALISER_VARIATION, SUB_RULES)
    return loop, new, log_mass, float(np.arccos(min(reach, 1.0)))


def _replace(mesh: SphereMesh, region: np.ndarray, loop: np.ndarray, new: np.ndarray, log_mass: np.ndarray):
    """The mesh with the region's triangles replaced by ``new`` and the region's inner vertices dropped."""
    dropped = np.zeros(mesh.points.shape[0], dtype=bool)
    dropped[np.unique(mesh.triangles[region])] = True
    dropped[loop] = False
    keep = ~dropped
    renumber = np.cumsum(keep) - 1
    triangles = np.concatenate([mesh.triangles[~region], new])
    return SphereMesh(
        mesh.points[keep],
        mesh.log_density[keep],
        renumber[triangles],
        np.concatenate([mesh.log_mass[~region], log_mass]),
    )


def _mass_moved(mesh: SphereMesh, region: np.ndarray, inverted: np.ndarray, log_c: np.ndarray) -> float:
    """A bound on the mass a region's repair puts elsewhere than the old mesh had it. The repair shares the region's
    mass by the old reconstruction read in one layer (the triangle each point is deepest inside). Where the old
    mesh covers the sphere once that reading is the old mass itself, so nothing moves; where it is folded, the
    layers not read are what moves. The unsigned solid angles of a folded mesh add to 4π plus twice the inverted
    triangles' A_inv (the signed sum is 4π), so the extra layers cover 2·A_inv in all, and the mass moved is at most
    2·A_inv times the largest density of the region's reconstruction (c_T e^ℓ at a vertex: it is exp-linear in
    each triangle), and never more than the region's mass (that, too, where the bound is not finite)."""
    a, b, c = (mesh.points[mesh.triangles[region, k]] for k in range(3))
    total = float(np.exp(mesh.log_mass[region]).sum())
    extra = 2.0 * spherical_area(a, b, c)[inverted[region]].sum()
    with np.errstate(invalid="ignore", over="ignore"):
        bound = extra * np.exp(np.max(log_c[region] + mesh.log_density[mesh.triangles[region]].max(axis=1)))
    return float(min(bound, total)) if np.isfinite(bound) else total


def repair_folds(mesh: SphereMesh, max_rings: int = MAX_RINGS) -> tuple[SphereMesh, dict]:
    """Replace every fold by a fresh triangulation of its surroundings (module docstring). Returns the new mesh (the
    input is not modified) and counts: folds (groups of inverted triangles found), repaired, left (groups the rings
    could not enclose), triangles_removed, triangles_added, mass_moved (``_mass_moved`` summed over the regions)
    and w2_moved, Σ sqrt(mass moved)·diameter over the regions: a repair moves mass only inside its region, so this
    bounds the W2 between the measures before and after it."""
    stats = {"folds": 0, "repaired": 0, "left": 0, "triangles_removed": 0, "triangles_added": 0, "mass_moved": 0.0,
             "w2_moved": 0.0}  # fmt: skip
    work, skipped = mesh, set()

    def key(group):  # by position: vertex numbers change as repairs drop vertices
        return frozenset(map(tuple, work.points[np.unique(work.triangles[group])].tolist()))

    while True:
        inverted = orientation(work.points, work.triangles) <= 0
        groups = [g for g in _vertex_groups(inverted, work.triangles, work.points.shape[0]) if key(g) not in skipped]
        if not groups:
            return work, stats
        group = groups[0]
        stats["folds"] += 1
        region = np.zeros(work.triangles.shape[0], dtype=bool)
        region[group] = True
        for _ in range(max_rings):
            region = _grow(region, work.triangles, work.points.shape[0])
            filled = _refill(work, region)
            if filled is not None:
                stats["repaired"] += 1
                stats["triangles_removed"] += int(region.sum())
                stats["triangles_added"] += int(filled[1].shape[0])
                mass = _mass_moved(work, region, inverted, log_normalisers(work))
                stats["mass_moved"] += mass
                # every old and new triangle lies in the region's cap (angular radius < π/2, so the cap is
                # spherically convex): no two of their points are farther apart than its chord diameter
                stats["w2_moved"] += math.sqrt(mass) * 2.0 * math.sin(filled[3])
                work = _replace(work, region, *filled[:3])
                break
        else:
            stats["left"] += 1
            skipped.add(key(group))
