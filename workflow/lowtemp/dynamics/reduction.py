"""The one-dimensional reductions of Eq. 2 and their initial cells, without the solver (no numba).

``reduce`` finds the symmetry (the circle d = 2, or d = 3 with B, V and ρ0 sharing an axis) and
refuses any input without one (``SymmetryBroken``; ``geometry`` sends d = 3 without it to the S² mesh
solver); ``uniform_edges`` and ``graded_edges`` lay out the initial cells. The config check builds these
before any job; ``lowtemp.dynamics.meanfield`` solves on them (derivation: docs/mean_field.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..model import measures

#: relative tolerance of B, V's axisymmetric form and of ρ0's axis
SYMMETRY_RTOL = 1e-10

#: initial measures with a density the reduction can take (atoms and caps have none or no smooth one)
DENSITY_MEASURES = ("uniform", "vmf_mixture")


class SymmetryBroken(ValueError):
    """The input has no symmetry that reduces Eq. 2 to one dimension; the message says which."""


#: narrowest cell (radians) the float64 angles resolve: 64 ulp of 2π; below it the reference stops
RESOLVED_WIDTH = 64 * float(np.spacing(2 * np.pi))


@dataclass(frozen=True)
class Reduction:
    """A one-dimensional reduction of Eq. 2: its geometry, frame and matrices in that frame.

    ``frame`` is orthonormal (columns): on S² its first column is the axis e. On the circle
    ``B``, ``V`` are the 2×2 matrices; on S² ``b_axis, b_perp, v_axis, v_perp`` their eigenvalues
    along e and on e⊥.
    """

    geometry: str
    frame: np.ndarray
    B: np.ndarray
    V: np.ndarray
    b_axis: float = 0.0
    b_perp: float = 0.0
    v_axis: float = 0.0
    v_perp: float = 0.0

    @property
    def lower(self) -> float:
        """Lower end of the Lagrangian coordinate (θ on the circle is unwrapped: no fixed ends)."""
        return 0.0

    @property
    def upper(self) -> float:
        return 2.0 * np.pi if self.geometry == "circle" else np.pi


def _axis_form(M: np.ndarray, name: str) -> np.ndarray | None:
    """M's axis of symmetry (None if M = cI); SymmetryBroken if M is not a·eeᵀ + b(I − eeᵀ)."""
    scale = max(float(np.abs(M).max()), 1e-300)
    if np.abs(M - M.T).max() > SYMMETRY_RTOL * scale:
        raise SymmetryBroken(
            f"axisymmetric reduction: {name} is not symmetric (|{name} − {name}ᵀ| = {np.abs(M - M.T).max():.3g})"
        )
    lam, U = np.linalg.eigh(0.5 * (M + M.T))
    gaps = np.abs(np.diff(lam))
    if gaps.max() <= SYMMETRY_RTOL * scale:
        return None
    if gaps.min() > SYMMETRY_RTOL * scale:
        raise SymmetryBroken(
            f"axisymmetric reduction: {name} has three distinct eigenvalues "
            f"{np.round(lam, 12).tolist()}; it must be diag(a, b, b) about one axis"
        )
    # the simple eigenvalue is the one not in the closest pair
    simple = 2 if gaps[0] <= gaps[1] else 0
    return U[:, simple]


def _frame_from_axis(e: np.ndarray) -> np.ndarray:
    e = e / np.linalg.norm(e)
    helper = np.eye(3)[int(np.argmin(np.abs(e)))]
    f2 = helper - (helper @ e) * e
    f2 /= np.linalg.norm(f2)
    return np.column_stack([e, f2, np.cross(e, f2)])


def _measure_axis(name: str, params: dict, dim: int) -> np.ndarray | None:
    """The axis ρ0 is invariant about (None: every axis, the uniform law); refuses others."""
    if name not in DENSITY_MEASURES:
        raise SymmetryBroken(
            f"mean-field reference: initial measure {name!r} has no density the "
            f"reduction can use (supported: {', '.join(DENSITY_MEASURES)})"
        )
    if name == "uniform":
        return None
    means = params.get("means")
    if means is None:
        raise SymmetryBroken(
            "mean-field reference: vmf_mixture needs explicit 'means' (random means break the symmetry)"
        )
    means = np.asarray(means, dtype=float)
    kappas = measures.check_kappas(params["kappas"])
    if means.shape != (kappas.size, dim) or np.any(np.linalg.norm(means, axis=1) == 0):
        raise SymmetryBroken(f"mean-field reference: means must be {kappas.size} non-zero vectors of length {dim}")
    if dim == 2:
        return None
    axis = means[0] / np.linalg.norm(means[0])
    for mean in means[1:]:
        mean = mean / np.linalg.norm(mean)
        if np.linalg.norm(np.cross(axis, mean)) > SYMMETRY_RTOL:
            raise SymmetryBroken(
                f"axisymmetric reduction: the vmf_mixture means do not lie on one axis ({np.round(means, 6).tolist()})"
            )
    return axis


def reduce(B: np.ndarray, V: np.ndarray, measure: str = "uniform", params: dict | None = None) -> Reduction:
    """The reduction of Eq. 2 with matrices B, V and initial measure ``measure``; SymmetryBroken if none."""
    B = np.asarray(B, dtype=float)
    V = np.asarray(V, dtype=float)
    params = dict(params or {})
    if B.ndim != 2 or B.shape[0] != B.shape[1] or V.shape != B.shape:
        raise ValueError(f"mean-field reference: B and V must be square of one size, got {B.shape}, {V.shape}")
    if not (np.all(np.isfinite(B)) and np.all(np.isfinite(V))):
        raise ValueError("mean-field reference: B and V must be finite")
    d = B.shape[0]
    rho_axis = _measure_axis(measure, params, d)
    if d == 2:
        return Reduction("circle", np.eye(2), B, V)
    if d != 3:
        raise SymmetryBroken(
            f"mean-field reference: no one-dimensional reduction in d = {d} "
            "(the circle d = 2 and axisymmetric d = 3 only)"
        )
    axes = [a for a in (_axis_form(B, "B"), _axis_form(V, "V"), rho_axis) if a is not None]
    if not axes:
        axes = [np.eye(3)[0]]
    e = axes[0] / np.linalg.norm(axes[0])
    for other in axes[1:]:
        if np.linalg.norm(np.cross(e, other)) > SYMMETRY_RTOL * np.linalg.norm(other):
            raise SymmetryBroken(
                "axisymmetric reduction: B, V and ρ0 do not share one axis "
                f"(axes {[np.round(a, 6).tolist() for a in axes]})"
            )
    frame = _frame_from_axis(e)
    values = {}
    for name, M in (("B", B), ("V", V)):
        a = float(e @ M @ e)
        p = float(np.trace(M) - a) / 2.0
        residual = np.abs(M - (a * np.outer(e, e) + p * (np.eye(3) - np.outer(e, e)))).max()
        if residual > SYMMETRY_RTOL * max(float(np.abs(M).max()), 1e-300):
            raise SymmetryBroken(
                f"axisymmetric reduction: {name} is not of the form a·eeᵀ + b(I − eeᵀ) "
                f"about the shared axis (residual {residual:.3g})"
            )
        values[name] = (a, p)
    if values["B"][0] == 0 or values["B"][1] == 0:
        raise ValueError("mean-field reference: B is singular")
    return Reduction(
        "axisymmetric",
        frame,
        B,
        V,
        b_axis=values["B"][0],
        b_perp=values["B"][1],
        v_axis=values["V"][0],
        v_perp=values["V"][1],
    )


def geometry(B: np.ndarray, V: np.ndarray, measure: str = "uniform", params: dict | None = None) -> str:
    """Which solver takes a ``model: mean_field`` experiment: "circle" or "axisymmetric" (``reduce`` applies,
    ``lowtemp.dynamics.meanfield``), or "sphere" (d = 3 without that symmetry: the S² mesh,
    ``lowtemp.dynamics.sphere_meanfield``). SymmetryBroken in any other dimension, ValueError for bad input."""
    try:
        return reduce(B, V, measure, params).geometry
    except SymmetryBroken:
        if np.shape(B) == (3, 3):
            return "sphere"
        raise


def unstable_points(red: Reduction) -> np.ndarray:
    """Lagrangian angles of E1⊥ (A = VBᵀ), towards which the initial cells are graded.

    Circle: ±(eigenvector of A's smaller eigenvalue) when A's eigenvalues are real and distinct;
    S²: the equator when E1 is the axis, the poles when E1 is the plane e⊥.
    """
    if red.geometry == "circle":
        A = red.V @ red.B.T
        lam, W = np.linalg.eig(A)
        if np.any(np.abs(lam.imag) > 0) or abs(lam[0] - lam[1]) <= SYMMETRY_RTOL * np.abs(lam).max():
            return np.empty(0)
        w = np.real(W[:, int(np.argmin(lam.real))])
        theta = math.atan2(w[1], w[0]) % (2 * np.pi)
        return np.sort(np.array([theta, (theta + np.pi) % (2 * np.pi)]))
    mu_axis, mu_perp = red.v_axis * red.b_axis, red.v_perp * red.b_perp
    if mu_axis > mu_perp:
        return np.array([0.5 * np.pi])
    if mu_perp > mu_axis:
        return np.array([0.0, np.pi])
    return np.empty(0)


def uniform_edges(red: Reduction, width: float) -> np.ndarray:
    """Initial edges of equal angle, at most ``width`` apart (0 … 2π on the circle, 0 … π on S²)."""
    if not 0 < width < 1:
        raise ValueError(f"mean-field reference: need 0 < width < 1, got width={width}")
    return np.linspace(red.lower, red.upper, int(math.ceil((red.upper - red.lower) / width)) + 1)


def check_edges(red: Reduction, edges: np.ndarray) -> None:
    """Refuse initial edges that do not tile the circle (span 2π) or the polar range [0, π] in order."""
    if edges.ndim != 1 or edges.size < 3 or not np.all(np.isfinite(edges)) or not np.all(np.diff(edges) > 0):
        raise ValueError("mean-field reference: initial edges must be at least 3 finite, increasing angles")
    if red.geometry == "circle" and abs(edges[-1] - edges[0] - 2 * np.pi) > 1e-12:
        raise ValueError("mean-field reference: circle edges must span exactly 2π (last = first + 2π)")
    if red.geometry == "axisymmetric" and (edges[0] != 0.0 or edges[-1] != np.pi):
        raise ValueError("mean-field reference: polar edges must run from 0 to π")


#: the geometric grading around an unstable point reaches this far (radians): there its cells, 2·width times
#: their distance wide, are ``width`` wide, and the uniform cells beyond keep the same bound on their images
GRADED_REACH = 0.5


def graded_edges(red: Reduction, width: float, depth: float) -> np.ndarray:
    """Initial edges graded geometrically (ratio 1 + 2·width) from ``depth`` out to GRADED_REACH on either side
    of every unstable point, and spaced evenly, at most ``width`` apart, in between.

    A geometric grid ε_j = depth·r^j keeps every cell's image under the linearised unstable flow
    (ε ↦ ε e^{λs}, seen as the angle arctan(ε e^{λs})) at most (r − 1)/2 = width wide at every time. The
    grading runs out to where its cells are ``width`` wide (ε = 1/2), so no cell is wider than r times
    its distance from the unstable point and the bound holds for every cell; a cell that stretched further
    would hold its tokens where a linear density places them badly (the flow map bends inside it), and the
    split that cuts it later would inherit that error in its new edge's Lagrangian coordinate.
    """
    if not 0 < depth < width < 1:
        raise ValueError(f"mean-field reference: need 0 < depth < width < 1, got width={width}, depth={depth}")
    if not depth < GRADED_REACH:
        raise ValueError(
            f"mean-field reference: depth = {depth} must be below the grading's reach {GRADED_REACH} "
            f"(beyond it nothing would be graded)"
        )
    if not 2.0 * width * depth > RESOLVED_WIDTH:
        raise ValueError(
            f"mean-field reference: the narrowest graded cell, 2·width·depth = {2 * width * depth:.3g} "
            f"rad, must be wider than float64 angles resolve ({RESOLVED_WIDTH:.3g}); raise depth"
        )
    lo, hi = red.lower, red.upper
    ratio = 1.0 + 2.0 * width
    steps = int(math.ceil(math.log(GRADED_REACH / depth) / math.log(ratio)))
    offsets = depth * ratio ** np.arange(steps + 1)
    offsets = offsets[offsets < GRADED_REACH]
    unstable = unstable_points(red)
    # the circle has no ends: its anchors are the graded points alone (0 only where there are none)
    points = [np.array([lo, hi])] if red.geometry != "circle" or unstable.size == 0 else []
    for p in unstable:
        points += [p - offsets, np.array([p]), p + offsets]
    anchors = np.concatenate(points)
    if red.geometry == "circle":
        anchors = np.unique(anchors % (2 * np.pi))
        anchors = np.append(anchors, anchors[0] + 2 * np.pi)
    else:
        anchors = np.unique(np.clip(anchors, lo, hi))
    # fill every gap wider than width evenly
    pieces = [np.linspace(a, b, int(math.ceil((b - a) / width)) + 1)[:-1] for a, b in zip(anchors[:-1], anchors[1:])]
    return np.append(np.concatenate(pieces), anchors[-1])
