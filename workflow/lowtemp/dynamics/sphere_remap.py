"""The mass-conservative remap behind every remeshing operation on the S² mesh (``sphere_remesh``'s splits and
flips, ``sphere_collapse``'s collapses, ``sphere_folds``' repairs), and the reconstruction it rests on, evaluated
anywhere.

Mass remap. Every operation replaces a patch P of old triangles by new triangles covering the same region of S²
(a split: one old triangle by its two halves; a flip: two by two; a collapse: the star of an edge by the fan of
the new vertex). The patch's mass M_P = Σ_{T∈P} m_T is shared out in proportion to the integral of the OLD
reconstruction (``sphere_mesh``: c_T exp(ℓ linear) on the radially projected chord triangle) over each new one:

    m_T' = M_P · I_T' / Σ_T'' I_T'',    I_T' = ∫_T' c_{T(y)} exp(ℓ_lin,T(y)(y)) dΩ(y),

T(y) the old triangle holding y. The I_T' are computed in log space (7-point rule on n × n sub-triangles of T',
every node located in the old patch), so Σ m is unchanged to rounding, a triangle of mass e^{-700} is handled as
any other, and triangles outside every patch keep their log-mass bit for bit. A new vertex takes ℓ from the old
reconstruction at its position (both sides of a split edge averaged in log space).

The reconstruction at arbitrary points: the triangle holding a unit vector and its barycentric coordinates
(``locate``), log ρ there (``log_density_at``), and the raw integrals of a patch's reconstruction over new chord
triangles (``reconstruction_log_integrals``), which the remap scales to the patch's mass.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy.spatial import cKDTree

from .sphere_mesh import (
    SUB_RULES,
    TABLE_SUBDIVISION,
    SphereMesh,
    _chord_frame,
    _log_integral,
    log_normalisers,
    subdivision,
)

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
    n = min(subdivision(max(la, lb, lc) - min(la, lb, lc), tolerance), TABLE_SUBDIVISION)
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
    n = min(subdivision(_patch_variation(log_density, triangles, patch_c, patch, npatch), tolerance), TABLE_SUBDIVISION)
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
# the reconstruction at arbitrary points


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


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
