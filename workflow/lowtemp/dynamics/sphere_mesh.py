"""Triangulated S² carrying a log-density: the representation of the general S² mean-field solver.

A ``SphereMesh`` holds vertices on the unit sphere with ℓ = log ρ at each vertex and triangles with a fixed
mass each (derivation: docs/sphere_mean_field.md). On a triangle T with vertices (a, b, c) the density is

    ρ(y) = c_T · exp(λ_a ℓ_a + λ_b ℓ_b + λ_c ℓ_c),   y = p/|p|,   p = λ_a a + λ_b b + λ_c c,

λ the barycentric coordinates of p on the flat chord triangle, radially projected onto the sphere (the solid
angle element is dΩ = d_T/|p|³ dA, d_T the distance of the chord plane from the origin). The normaliser c_T is
fixed by T holding exactly its mass m_T, so the total mass is exact whatever ℓ is; ℓ only shapes the density
inside a triangle, and log c_T (0 when vertex values and masses agree) measures how far they disagree.

Quadrature on a triangle: the Dunavant degree-5 7-point rule on n × n congruent sub-triangles (``SUB_RULES``).
Everything is in log space: a triangle 700 e-folds below another is integrated as exactly as the other.

Arrays: ``points`` (vertex, 3), ``log_density`` (vertex,), ``triangles`` (triangle, 3) int64, counter-clockwise
seen from outside, ``log_mass`` (triangle,).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .sphere_geometry import edge_lengths, icosphere, orientation, spherical_area  # noqa: F401 (the mesh's API)
from .sphere_levels import MAX_SUBDIVISION, MeshTooCoarse  # noqa: F401 (the mesh's API)

#: the Dunavant degree-5 rule: barycentric nodes and weights (weights sum to 1; times the area)
_A1, _B1, _W1 = 0.059715871789770, 0.470142064105115, 0.132394152788506
_A2, _B2, _W2 = 0.797426985353087, 0.101286507323456, 0.125939180544827
RULE_BARY = np.array(
    [
        [1 / 3, 1 / 3, 1 / 3],
        [_A1, _B1, _B1],
        [_B1, _A1, _B1],
        [_B1, _B1, _A1],
        [_A2, _B2, _B2],
        [_B2, _A2, _B2],
        [_B2, _B2, _A2],
    ]
)
RULE_WEIGHTS = np.array([0.225, _W1, _W1, _W1, _W2, _W2, _W2])


def _sub_rules(nmax: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Barycentric nodes (n, node, 3), weights (n, node) and node counts (n,) of the 7-point rule on the n × n
    sub-triangles of the reference triangle, n = 1 … nmax (row 0 unused), padded with zero weights."""
    size = 7 * nmax * nmax
    bary = np.zeros((nmax + 1, size, 3))
    weights = np.zeros((nmax + 1, size))
    count = np.zeros(nmax + 1, dtype=np.int64)
    for n in range(1, nmax + 1):
        rows = []
        for i in range(n):
            for j in range(n - i):
                corners = [((i, j), (i + 1, j), (i, j + 1))]
                if i + j <= n - 2:  # the downward sub-triangle of the same row
                    corners.append(((i + 1, j), (i + 1, j + 1), (i, j + 1)))
                for tri in corners:
                    lam = np.array([[1 - (p + q) / n, p / n, q / n] for p, q in tri])
                    rows.append(RULE_BARY @ lam)
        nodes = np.concatenate(rows)
        bary[n, : nodes.shape[0]] = nodes
        weights[n, : nodes.shape[0]] = np.tile(RULE_WEIGHTS, n * n) / (n * n)
        count[n] = nodes.shape[0]
    return bary, weights, count


#: the finest tabled rule (``SUB_RULES``): the normalisers, the remap and the source tree take their rules from the
#: tables (an ℓ varying by more than TABLE_SUBDIVISION·0.5 e-folds over one triangle gets the finest); the softmax
#: builds its pieces itself, up to ``MAX_SUBDIVISION``
TABLE_SUBDIVISION = 24
SUB_BARY, SUB_WEIGHTS, SUB_COUNT = _sub_rules(TABLE_SUBDIVISION)


class SubRules(NamedTuple):
    """The 7-point rule on n × n sub-triangles for every n ≤ TABLE_SUBDIVISION, as the numba kernels take it
    (``_sub_rules``): barycentric nodes ``bary`` (n, node, 3), their weights (n, node) and how many nodes each n has
    (n,)."""

    bary: np.ndarray
    weights: np.ndarray
    count: np.ndarray


SUB_RULES = SubRules(SUB_BARY, SUB_WEIGHTS, SUB_COUNT)


class MeshArrays(NamedTuple):
    """A ``SphereMesh``'s arrays as the numba kernels take them: vertices on S² (vertex, 3), ℓ = log ρ at each
    vertex (vertex,), triangles (triangle, 3) counter-clockwise seen from outside, log m_T of each (triangle,). The
    arrays are the mesh's own: a kernel that writes to them changes the mesh."""

    points: np.ndarray
    log_density: np.ndarray
    triangles: np.ndarray
    log_mass: np.ndarray


@dataclass
class SphereMesh:
    """Vertices on S² with their log-density, triangles with their log-mass (layouts: module docstring)."""

    points: np.ndarray
    log_density: np.ndarray
    triangles: np.ndarray
    log_mass: np.ndarray

    def copy(self) -> SphereMesh:
        """An independent copy (every array copied)."""
        return SphereMesh(self.points.copy(), self.log_density.copy(), self.triangles.copy(), self.log_mass.copy())

    def arrays(self) -> MeshArrays:
        """The mesh's arrays (not copies) for a numba kernel."""
        return MeshArrays(self.points, self.log_density, self.triangles, self.log_mass)

    @property
    def masses(self) -> np.ndarray:
        """m_T of every triangle."""
        return np.exp(self.log_mass)

    def check(self) -> None:
        """ValueError naming the first inconsistency: shapes, unit vertices, finite values, orientation."""
        n = self.points.shape[0]
        if self.points.ndim != 2 or self.points.shape[1] != 3:
            raise ValueError(f"sphere mesh: points must be (vertex, 3), got {self.points.shape}")
        if self.log_density.shape != (n,):
            raise ValueError(f"sphere mesh: log_density must be ({n},), got {self.log_density.shape}")
        if self.triangles.ndim != 2 or self.triangles.shape[1] != 3:
            raise ValueError(f"sphere mesh: triangles must be (triangle, 3), got {self.triangles.shape}")
        if self.log_mass.shape != (self.triangles.shape[0],):
            raise ValueError(f"sphere mesh: log_mass must be ({self.triangles.shape[0]},), got {self.log_mass.shape}")
        if self.triangles.min() < 0 or self.triangles.max() >= n:
            raise ValueError("sphere mesh: a triangle names a vertex that does not exist")
        for name, a in (("points", self.points), ("log_density", self.log_density), ("log_mass", self.log_mass)):
            if not np.all(np.isfinite(a)):
                raise ValueError(f"sphere mesh: {name} holds non-finite values")
        drift = np.abs(np.linalg.norm(self.points, axis=1) - 1.0).max()
        if drift > 1e-12:
            raise ValueError(f"sphere mesh: vertices off the unit sphere by {drift:.3g}")
        if np.any(orientation(self.points, self.triangles) <= 0):
            raise ValueError("sphere mesh: a triangle is degenerate or not counter-clockwise seen from outside")


@njit(cache=True, inline="always")
def _chord_frame(a, b, c):
    """Flat area of the chord triangle and the distance of its plane from the origin."""
    e1x, e1y, e1z = b[0] - a[0], b[1] - a[1], b[2] - a[2]
    e2x, e2y, e2z = c[0] - a[0], c[1] - a[1], c[2] - a[2]
    nx = e1y * e2z - e1z * e2y
    ny = e1z * e2x - e1x * e2z
    nz = e1x * e2y - e1y * e2x
    norm = math.sqrt(nx * nx + ny * ny + nz * nz)
    return 0.5 * norm, abs(nx * a[0] + ny * a[1] + nz * a[2]) / norm


@njit(cache=True)
def _log_integral(a, b, c, ell, n, sub_bary, sub_weights, sub_count):
    """log ∫_T exp(ℓ_lin) dΩ on the radially projected chord triangle (a, b, c), ℓ = ``ell`` = (ℓ_a, ℓ_b, ℓ_c) at its
    vertices, 7-point rule on n × n sub-triangles (``SubRules``' arrays). It takes arrays, not a ``SubRules``: a
    parallel loop that passed a tuple of arrays would rebuild it, counting references, at every triangle."""
    la, lb, lc = ell
    area, dist = _chord_frame(a, b, c)
    top = max(la, lb, lc)
    total = 0.0
    for q in range(sub_count[n]):
        l0, l1, l2 = sub_bary[n, q, 0], sub_bary[n, q, 1], sub_bary[n, q, 2]
        px = l0 * a[0] + l1 * b[0] + l2 * c[0]
        py = l0 * a[1] + l1 * b[1] + l2 * c[1]
        pz = l0 * a[2] + l1 * b[2] + l2 * c[2]
        r2 = px * px + py * py + pz * pz
        total += sub_weights[n, q] * math.exp(l0 * la + l1 * lb + l2 * lc - top) / (r2 * math.sqrt(r2))
    return top + math.log(total * area * dist)


@njit(cache=True, inline="always")
def subdivision(variation, tolerance):
    """Sub-triangles per edge so that the integrand's log varies by at most ``tolerance`` on each (≥ 1;
    MAX_SUBDIVISION + 1 flags a triangle the rule cannot resolve)."""
    n = int(math.ceil(variation / tolerance))
    return min(max(n, 1), MAX_SUBDIVISION + 1)


#: log-variation of ℓ per sub-triangle in the normalisers (the degree-5 rule's relative error on e^{linear} of
#: variation c is about c⁶/10⁵: below 1e-7 at 0.5)
NORMALISER_VARIATION = 0.5


@njit(cache=True, parallel=True)
def _log_normalisers(mesh, tolerance, rules, out):
    """log c_T of every triangle into ``out`` (``log_normalisers``)."""
    points, log_density, triangles, log_mass = mesh
    sub_bary, sub_weights, sub_count = rules
    for t in prange(triangles.shape[0]):
        i, j, k = triangles[t, 0], triangles[t, 1], triangles[t, 2]
        la, lb, lc = log_density[i], log_density[j], log_density[k]
        n = min(subdivision(max(la, lb, lc) - min(la, lb, lc), tolerance), TABLE_SUBDIVISION)
        ell = (la, lb, lc)
        out[t] = log_mass[t] - _log_integral(points[i], points[j], points[k], ell, n, sub_bary, sub_weights, sub_count)


def log_normalisers(mesh: SphereMesh, tolerance: float = NORMALISER_VARIATION) -> np.ndarray:
    """log c_T of every triangle: the constant that makes its exp-linear density hold exactly m_T."""
    out = np.empty(mesh.triangles.shape[0])
    _log_normalisers(mesh.arrays(), tolerance, SUB_RULES, out)
    return out


def triangle_nodes(points: np.ndarray, triangles: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes on the sphere (triangle, node, 3) and their solid-angle weights (triangle, node) of the
    7-point rule on n × n sub-triangles of every radially projected chord triangle."""
    bary, w = SUB_BARY[n, : SUB_COUNT[n]], SUB_WEIGHTS[n, : SUB_COUNT[n]]
    a, b, c = (points[triangles[:, k]] for k in range(3))
    p = np.einsum("qk,tkj->tqj", bary, np.stack([a, b, c], axis=1))
    r = np.linalg.norm(p, axis=-1)
    normal = np.cross(b - a, c - a)
    area = 0.5 * np.linalg.norm(normal, axis=1)
    dist = np.abs(np.einsum("ij,ij->i", normal, a)) / (2.0 * area)
    return p / r[..., None], w[None, :] * (area * dist)[:, None] / r**3


def mesh_from_density(level: int, log_density, n: int = 8) -> SphereMesh:
    """The icosphere of ``level`` with ℓ = log_density(points) at its vertices and triangle masses of the density
    ``log_density`` (a function of unit vectors (…, 3) → log ρ per steradian), by the n × n rule rescaled so that
    the rule integrates every triangle's exact solid angle (a uniform density's masses are then exact)."""
    points, triangles = icosphere(level)
    return mesh_on(points, triangles, log_density, n)


def mesh_on(points: np.ndarray, triangles: np.ndarray, log_density, n: int = 8) -> SphereMesh:
    """The mesh of ``points`` (on S²) and ``triangles`` carrying the density ``log_density`` (as
    ``mesh_from_density``)."""
    nodes, weights = triangle_nodes(points, triangles, n)
    a, b, c = (points[triangles[:, k]] for k in range(3))
    weights = weights * (spherical_area(a, b, c) / weights.sum(axis=1))[:, None]
    log_f = np.asarray(log_density(nodes), dtype=float)
    top = log_f.max(axis=1, keepdims=True)
    log_mass = top[:, 0] + np.log(np.sum(weights * np.exp(log_f - top), axis=1))
    mesh = SphereMesh(points, np.asarray(log_density(points), dtype=float), triangles, log_mass)
    mesh.check()
    return mesh
