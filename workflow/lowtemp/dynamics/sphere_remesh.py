"""ALE remeshing of the Lagrangian sphere mesh: split long edges, flip to Delaunay, collapse short edges and the
short edges of slivers, every operation conservative in its patch.

Why: under the flow the tail is strained anisotropically. A purely Lagrangian triangulation turns into slivers
there, and splitting the long edges alone makes the number of triangles grow exponentially in time; flipping and
collapsing keep the triangles well shaped and their number growing like the area the size field asks to resolve.

Every operation replaces a patch of old triangles by new triangles covering the same region of S² (a split:
one old triangle by its two halves; a flip: two by two; a collapse, ``sphere_collapse``: the star of an edge by
the fan of the new vertex) and shares the patch's mass over them by the integral of the old reconstruction
(``sphere_remap``): Σ m is unchanged to rounding, and triangles outside every patch keep their log-mass bit for
bit.

Operations on disjoint patches are applied in passes (an independent set per pass, chosen greedily: longest edges
first for splits, shortest first for collapses); ``adapt`` runs a few rounds of split, flip, collapse, flip.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numba import njit

from .sphere_collapse import Alive, CollapseLimits, Stars, _collapse
from .sphere_mesh import NORMALISER_VARIATION, SUB_RULES, SphereMesh
from .sphere_remap import _log_normaliser, _remap_patch, _unit

#: split edges longer than this many target lengths
SPLIT_RATIO = 1.5
#: collapse edges shorter than this many target lengths (0: only slivers). Off by default: a contracting cluster
#: must keep its Lagrangian triangles; coarsening it moved W2 to the cluster centres by 75 % at t = 10 in the
#: zero-temperature dry run (studies/sphere_zero_temperature.py --collapse-ratio 0.5), against 5e-4 without
COLLAPSE_RATIO = 0.0
#: a triangle whose aspect ratio (longest edge over the height on it; 2/√3 when equilateral) exceeds this is a
#: sliver: its shortest edge is collapsed
SLIVER_ASPECT = 6.0
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


# ---------------------------------------------------------------------------------------------------------------
# chord-triangle shape


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
