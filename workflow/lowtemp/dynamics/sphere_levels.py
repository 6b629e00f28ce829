"""What the S² solver's input must be, without the solver (no numba): the sub-division rule's screening test,
the icosphere levels the pipeline's reference uses at each β and its settings' constants, and ρ0's log-density.

The config check (``lowtemp.config.validation``) reads this module before any job; the solver
(``sphere_meanfield``, ``sphere_softmax``, ``sphere_mesh``) takes its constants from here. Derivation:
docs/sphere_mean_field.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ..model import measures
from .sphere_geometry import edge_lengths, icosphere

#: finest halving of a triangle by the softmax: pieces down to 1/2^MAX_HALVINGS of its edges; a triangle that needs
#: finer ones is too coarse for the kernel (``MeshTooCoarse``). The softmax halves only the pieces whose exponent
#: varies more than the tolerance and skips those its bound puts below the pruning depth, so a triangle larger than
#: the kernel costs what the kernel's window inside it costs (docs/sphere_mean_field.md)
MAX_HALVINGS = 8
#: the finest sub-division, in pieces per edge
MAX_SUBDIVISION = 2**MAX_HALVINGS
#: default log-variation of the exponent per sub-triangle: on vMF mixtures at β = 10 … 10⁴ (meshes as fine as the
#: kernel) the mean is then within 2e-4 of the β-effect |m − b̂| and takes 5–8·10³ nodes per query at β ≥ 1000
#: (tests/dynamics/test_sphere_softmax.py; docs/sphere_mean_field.md)
DEFAULT_VARIATION = 3.0
#: default pruning depth: skipped triangles hold less than (triangles)·e^{−40} ≈ 4e-18·(triangles) of Z
DEFAULT_DEPTH = 40.0


#: smallest singular value of B, relative to its largest, that the solver accepts: below it |Bᵀx| nearly vanishes
#: somewhere, where the softmax's centre b̂ = Bᵀx/|Bᵀx| is undefined (Assumption 1 asks for B invertible)
B_CONDITION = 1e-8
#: initial measures the solver takes: those with a positive, smooth density on the whole sphere
DENSITY_MEASURES = ("uniform", "vmf_mixture")


class MeshTooCoarse(ValueError):
    """A triangle is too large for the variation of the integrand over it; the message says by how much."""


def kernel_width(B: np.ndarray, beta: float) -> float:
    """The narrowest softmax kernel over the sphere, (β σ_max(B))^{−1/2} radians."""
    return (beta * float(np.linalg.svd(B, compute_uv=False)[0])) ** -0.5


def subdivision_needed(radius: float, B: np.ndarray, beta: float, depth: float) -> float:
    """Largest variation of κ⟨b̂, y⟩ over a kept triangle of cap radius ``radius``, κ = β σ_max(B): a triangle at
    an angle up to sqrt(2·depth/κ) from the kernel's centre sees 2r·sqrt(2·depth·κ) + κr²
    (``sphere_meanfield.check_resolution``)."""
    kappa = beta * float(np.linalg.svd(B, compute_uv=False)[0])
    return 2.0 * radius * math.sqrt(2.0 * depth * kappa) + kappa * radius**2


# ---------------------------------------------------------------------------------------------------------------
# the pipeline's reference: two icosphere levels, the finer one the reference, their difference its error
#: DOP853's relative tolerance of the pipeline's reference (atol a hundredth of it): the softmax's adaptive
#: quadrature makes the field piecewise smooth at about 1e-5, so a tighter one buys nothing; until the clusters
#: contract the steps are set by the stops (remeshing, snapshots), and from t ≈ 8–9 at β = 100, where the tolerance
#: sets them, 1e-3 takes 1.55–1.65 times fewer field evaluations than 1e-4 and moves the tracers by 2–3e-5 (RMS)
#: over one to 1.5 units of time, 50–140 times below the two levels' difference (docs/decisions/0015)
REFERENCE_RTOL = 1e-3
#: pruning depth of the pipeline's reference: a skipped triangle holds less than e^{−20} ≈ 2e-9 of the proven lower
#: bound of Z. On a clustered state (two vMF clusters of concentration 40 on ±E1(A), concentration's matrices) the
#: velocity moved by at most 2e-9 and the divergence by at most 5e-8 against depth 40, far below the solve's rtol 1e-3,
#: while a field evaluation took 2.5× (β = 10) and 1.4× (β = 100) less (tests/dynamics/test_sphere_levels.py checks
#: 1e-7 and 1e-6)
REFERENCE_DEPTH = 20.0
#: largest W2 the pipeline's reference may owe to the folds of its mesh (near-empty tail, where flattened triangles
#: cross under the ODE's error: docs/sphere_mean_field.md, "Folds"): the bound ``sphere_meanfield.fold_w2``, which is
#: added to the reference's error estimate; above this the folds rather than the resolution would set that estimate
#: and the run stops (for mass left inside out the bound is 2·sqrt(mass): this allows 6e-4 of the mass there)
FOLD_W2_TOLERANCE = 0.05
#: time between remeshings of the pipeline's reference (config/sphere.yaml's snapshot interval): every 0.5 moved the
#: tracers by up to 10⁻² RMS at β = 100 on level 3 (t = 4), more than the two levels' difference there
#: (docs/decisions/0015; the snapshots between remeshings change nothing: docs/decisions/0025)
REFERENCE_REMESH_EVERY = 0.25
#: the remeshing target edge over the initial icosphere's longest edge (edges split above 1.5 times the target)
REFERENCE_EDGE_RATIO = 1.5
#: the icosphere levels the pipeline's reference may use: from level 2 (320 triangles, the coarsest that the tests
#: compare with converged particles) to level 6 (81 920 triangles)
REFERENCE_LEVELS = range(2, 7)


def icosphere_triangles(level: int) -> int:
    """Triangles of the icosphere of ``level``: 20·4^level."""
    return 20 * 4**level


@functools.cache
def reference_edge(level: int) -> float:
    """The remeshing target edge (rad) of a reference started on the icosphere of ``level`` (cached: the config
    check asks for it per β, and level 5's icosphere takes seconds to build)."""
    points, triangles = icosphere(level)
    return REFERENCE_EDGE_RATIO * float(edge_lengths(points, triangles).max())


#: pieces per edge, at the default variation, up to which a level counts as *as fine as the kernel*: the reference's
#: own choice of levels (``reference_levels`` without ``level``) takes the coarsest such level
KERNEL_SUBDIVISION = 24
#: the softmax's variation on a level coarser than the kernel (``reference_variation``): there the pieces' sizes
#: differ on the two sides of the kernel's centre and the 7-point rule's errors no longer cancel in the mean. On vMF
#: mixtures at β = 1000, levels 3 and 4, the mean erred by 2–3 % of the β-effect |m − b̂| at the default 3 and by
#: 1.8e-4 at 1.5, for 3.1–3.2 times the nodes (tests/dynamics/test_sphere_softmax.py)
COARSE_VARIATION = 1.5


def _variation_needed(level: int, B: np.ndarray, beta: float) -> float:
    """The largest variation of the exponent over a kept triangle of a reference on ``level`` (remeshed to
    ``reference_edge(level)``, the reference's pruning depth) at β (``subdivision_needed``)."""
    return subdivision_needed(reference_edge(level), B, beta, REFERENCE_DEPTH)


def as_fine_as_the_kernel(level: int, B: np.ndarray, beta: float) -> bool:
    """Whether ``level``'s triangles need at most ``KERNEL_SUBDIVISION`` pieces per edge at the default variation."""
    return _variation_needed(level, B, beta) <= KERNEL_SUBDIVISION * DEFAULT_VARIATION


def reference_variation(level: int, B: np.ndarray, beta: float) -> float:
    """The softmax's variation for a reference on ``level`` at β: the default where the level is as fine as the
    kernel, ``COARSE_VARIATION`` where it is coarser."""
    return DEFAULT_VARIATION if as_fine_as_the_kernel(level, B, beta) else COARSE_VARIATION


def level_resolves(level: int, B: np.ndarray, beta: float) -> bool:
    """Whether a reference on the icosphere of ``level`` passes ``check_resolution`` at β: at most
    ``MAX_SUBDIVISION`` pieces per edge at its variation (``reference_variation``)."""
    return _variation_needed(level, B, beta) <= MAX_SUBDIVISION * reference_variation(level, B, beta)


def reference_levels(B: np.ndarray, beta: float, level=None, betas=None) -> tuple[int, int]:
    """(coarse, fine) icosphere levels of the pipeline's reference at β: ``level`` and the one below it, or without
    ``level`` the coarsest level as fine as the kernel (``KERNEL_SUBDIVISION``) and the one above it. ``level`` is
    ``mean_field.level``: one level for every β, or a list of one per β of ``betas``. MeshTooCoarse naming β when
    the coarse level is beyond the softmax (or no level in ``REFERENCE_LEVELS`` is as fine as the kernel)."""
    B = np.asarray(B, dtype=float)
    if isinstance(level, (list, tuple)):
        if betas is None or len(level) != len(betas):
            raise ValueError(f"S² mean field: level must give one level per beta ({betas!r}), got {level!r}")
        level = level[[float(b) for b in betas].index(float(beta))]
    if level is None:
        usable = [k for k in REFERENCE_LEVELS[:-1] if as_fine_as_the_kernel(k, B, beta)]
        if not usable:
            raise MeshTooCoarse(
                f"S² mean field: no icosphere level up to {REFERENCE_LEVELS[-1]} resolves beta = {beta:g} "
                f"(kernel width {kernel_width(B, beta):.3g} rad)"
            )
        return usable[0], usable[0] + 1
    if level - 1 not in REFERENCE_LEVELS or level not in REFERENCE_LEVELS:
        raise ValueError(
            f"S² mean field: level must lie in {REFERENCE_LEVELS[0] + 1} … {REFERENCE_LEVELS[-1]}, got {level!r}"
        )
    if not level_resolves(level - 1, B, beta):
        raise MeshTooCoarse(
            f"S² mean field: at beta = {beta:g} the error estimate's level {level - 1} (one below level {level}) is "
            f"too coarse for the softmax ({kernel_width(B, beta):.3g} rad wide kernel, more than {MAX_SUBDIVISION} "
            "pieces per triangle edge); raise level, or leave it out to take the coarsest level as fine as the kernel"
        )
    return level - 1, level


def log_density0(measure: str, params: dict) -> Callable[[np.ndarray], np.ndarray]:
    """log ρ0 per steradian as a function of unit vectors (…, 3): uniform, or a von Mises–Fisher mixture
    (κ e^{κ(⟨μ,y⟩ − 1)}/(2π(1 − e^{−2κ})) per component, written so that no exponent overflows)."""
    if measure == "uniform":
        return lambda y: np.full(np.shape(y)[:-1], -math.log(4 * math.pi))
    if measure != "vmf_mixture":
        raise ValueError(
            f"S² mean field: initial measure {measure!r} has no positive smooth density; "
            f"the solver takes {', '.join(DENSITY_MEASURES)}"
        )
    kappas = measures.check_kappas(params["kappas"])
    weights = measures.check_weights(params.get("weights"), kappas.size)
    if params.get("means") is None:
        raise ValueError(
            "S² mean field: vmf_mixture needs explicit means (drawn ones are known to the initial tokens only)"
        )
    means = np.asarray(params["means"], dtype=float).reshape(kappas.size, 3)
    norms = np.linalg.norm(means, axis=1)
    if not np.all(np.isfinite(norms)) or np.any(norms < 1e-150):
        raise ValueError("S² mean field: every vMF mean must be a finite non-zero vector")
    means = means / norms[:, None]

    def log_norm(kappa: float) -> float:
        if kappa == 0:
            return math.log(4 * math.pi)
        return math.log(2 * math.pi) + math.log(-math.expm1(-2 * kappa)) - math.log(kappa)

    def f(y):
        parts = [math.log(w) + k * (np.asarray(y) @ mu - 1.0) - log_norm(k) for k, w, mu in zip(kappas, weights, means)]
        return np.logaddexp.reduce(np.stack(parts), axis=0)

    return f
