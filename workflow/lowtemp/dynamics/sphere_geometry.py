"""The geometry of triangulated S² without the solver (no numba): the icosphere, solid angles, edge lengths.

Arrays: ``points`` (vertex, 3) unit vectors, ``triangles`` (triangle, 3) int64, counter-clockwise seen from outside.
The config check reads the icosphere's edges from here (``sphere_levels``) before any job, without loading numba.
"""

from __future__ import annotations

import math

import numpy as np


def icosphere(level: int) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (vertex, 3) and counter-clockwise triangles (triangle, 3) of the icosahedron subdivided
    ``level`` times (20·4^level triangles, edges ≈ 1.107/2^level rad)."""
    if not isinstance(level, (int, np.integer)) or level < 0:
        raise ValueError(f"icosphere: level must be a non-negative integer, got {level!r}")
    g = (1.0 + 5**0.5) / 2.0
    points = [
        np.array(p, dtype=float) / math.sqrt(1 + g * g)
        for p in [[-1, g, 0], [1, g, 0], [-1, -g, 0], [1, -g, 0], [0, -1, g], [0, 1, g], [0, -1, -g], [0, 1, -g]]
        + [[g, 0, -1], [g, 0, 1], [-g, 0, -1], [-g, 0, 1]]
    ]
    faces = [
        [0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9], [5, 11, 4], [11, 10, 2],
        [10, 7, 6], [7, 1, 8], [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9], [4, 9, 5], [2, 4, 11],
        [6, 2, 10], [8, 6, 7], [9, 8, 1],
    ]  # fmt: skip
    for _ in range(level):
        midpoint: dict[tuple[int, int], int] = {}
        refined = []
        for a, b, c in faces:
            ab, bc, ca = (_middle(points, midpoint, i, j) for i, j in ((a, b), (b, c), (c, a)))
            refined += [[a, ab, ca], [b, bc, ab], [c, ca, bc], [ab, bc, ca]]
        faces = refined
    X, F = np.array(points), np.array(faces, dtype=np.int64)
    flip = orientation(X, F) < 0
    F[flip] = F[flip][:, [0, 2, 1]]
    return X, F


def _middle(points: list, midpoint: dict, i: int, j: int) -> int:
    """Index of the normalised midpoint of edge (i, j), appended to ``points`` the first time it is asked for."""
    key = (min(i, j), max(i, j))
    if key not in midpoint:
        p = points[i] + points[j]
        points.append(p / np.linalg.norm(p))
        midpoint[key] = len(points) - 1
    return midpoint[key]


def orientation(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """((b − a) × (c − a))·(a + b + c) per triangle: positive when counter-clockwise seen from outside."""
    a, b, c = (points[triangles[:, k]] for k in range(3))
    return np.einsum("ij,ij->i", np.cross(b - a, c - a), a + b + c)


def spherical_area(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Solid angle of the spherical triangles (a, b, c) (rows of unit vectors), by Van Oosterom–Strackee."""
    num = np.abs(np.einsum("ij,ij->i", a, np.cross(b, c)))
    den = 1.0 + np.einsum("ij,ij->i", a, b) + np.einsum("ij,ij->i", b, c) + np.einsum("ij,ij->i", c, a)
    return 2.0 * np.arctan2(num, den)


def edge_lengths(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """Great-circle lengths (triangle, 3) of the edges opposite each vertex's successor: (ab, bc, ca)."""
    out = np.empty(triangles.shape)
    for k in range(3):
        p, q = points[triangles[:, k]], points[triangles[:, (k + 1) % 3]]
        # atan2 of |p × q| and p·q: accurate for tiny and for near-antipodal edges alike
        out[:, k] = np.arctan2(np.linalg.norm(np.cross(p, q), axis=1), np.einsum("ij,ij->i", p, q))
    return out
