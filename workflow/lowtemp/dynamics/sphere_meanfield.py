"""The mean field of Eq. 2 on S² for general B, V and ρ0 (d = 3, no symmetry): a Lagrangian log-density mesh.

The vertices of a ``SphereMesh`` move with the mean-field velocity v = P_x V m(x) and carry ℓ = log ρ along
characteristics, dℓ/dt = −div_S v (the continuity equation written along a trajectory); every triangle keeps its
mass. The softmax mean m(x) and the divergence come from one pass over the triangles in log space
(``sphere_softmax``), so the density where a clustered token's softmax is decided (its Laplace point, e^{−30} of
uniform late in the metastable window) is known relative to itself, whatever its depth. The pipeline's tokens are
tracers advected in the same field, so the same-token coupling of W2(ρ^β_t, ρ^∞_t) holds for the mean field too.
Derivation, accuracy and limits: docs/sphere_mean_field.md.

Time stepping: a Runge–Kutta pair (DOP853 unless told) on (vertices, ℓ, tracers) with its step carried across
stops (the remeshings and the last time); positions are put back on the sphere at every stop, and a snapshot
between two stops is read from the steps' dense output. A remeshing callable (``sphere_remesh.adapt``) may replace
the mesh at the stops: it must keep every patch's mass, and the tracers are untouched by it.

Arrays: tracers (…, token, 3) in, (…, time, token, 3) out, as everywhere in the package.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.integrate import DOP853, RK45

from ..model import projection
from .meanfield import StepUnderflow, _advance_edges, remesh_stops
from .sphere_aggregate import aggregated_field, exact_softmax
from .sphere_folds import repair_folds
from .sphere_levels import (
    B_CONDITION,
    DEFAULT_DEPTH,
    DEFAULT_VARIATION,
    MAX_SUBDIVISION,
    REFERENCE_DEPTH,
    REFERENCE_REMESH_EVERY,
    REFERENCE_RTOL,
    MeshTooCoarse,
    kernel_width,
    log_density0,
    reference_edge,
    subdivision_needed,
)
from .sphere_march import March, Resumable, resumed
from .sphere_mesh import (
    SUB_BARY,
    SUB_COUNT,
    SphereMesh,
    edge_lengths,
    log_normalisers,
    mesh_from_density,
    orientation,
    spherical_area,
    triangle_nodes,
)
from .sphere_remesh import adapt
from .sphere_softmax import check_settings as _check_softmax_settings
from .sphere_softmax import velocity_divergence


@dataclass(frozen=True)
class SphereSettings:
    """How the mean field is discretised (the initial mesh is the caller's, ``initial_mesh``): the softmax's
    sub-division tolerance
    ``variation`` and pruning ``depth``; the integrator's ``rtol`` and ``atol`` (positions in radians, ℓ in e-folds);
    stops for remeshing every ``remesh_every`` to the target edge ``edge`` (radians; None: no remeshing); the solve
    stops at the first stop after a snapshot where its mesh holds more than ``max_triangles`` (None: no limit), the
    later snapshots left out (``info["resolved_until"]``), so a run whose mesh outgrows the machine ends with what
    it has; ``keep_on_failure``: a solve the flow takes beyond what it can resolve (a triangle too large for the
    softmax at β on the shortest stretch, ``SHORTEST_STRETCH``, or the integrator's step underflowing) ends with the
    snapshots it reached and says why in ``info["stopped"]``, instead of raising (a long study keeps its work);
    ``aggregate``: crowded queries expanded about their group's centre (``sphere_aggregate``); ``sources``: triangles
    aggregated as sources (``sphere_sources``); ``integrator``: the Runge–Kutta pair that moves the state
    (``INTEGRATORS``)."""

    edge: float | None = None
    variation: float = DEFAULT_VARIATION
    depth: float = DEFAULT_DEPTH
    rtol: float = 1e-7
    atol: float = 1e-9
    remesh_every: float = 0.25
    max_triangles: int | None = None
    keep_on_failure: bool = False
    aggregate: bool = False
    sources: bool = False
    integrator: str = "DOP853"


@dataclass
class SphereMeanFieldSolution:
    """The mesh at every snapshot and the tracers' trajectories (…, time, token, 3); ``info`` counts."""

    beta: float
    times: np.ndarray
    meshes: list[SphereMesh]
    tracers: np.ndarray | None
    info: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)

    def integrate(self, k: int, f: Callable[[np.ndarray], np.ndarray], n: int = 2) -> float:
        """∫ f dρ_t at snapshot k (f of unit vectors (…, 3)), by the n × n rule on every triangle."""
        nodes, weights = snapshot_nodes(self.meshes[k], n)
        return float(np.sum(weights * f(nodes)))

    def distance_to_eigenspace(self, E: np.ndarray, n: int = 2) -> np.ndarray:
        """sqrt(∫ (2 − 2|Eᵀx|) dρ_t) per snapshot (E (3, k) orthonormal): the mean-field counterpart of
        ``projection.distance_to_eigenspace`` (the same per-point distance, without cancellation); NaN at
        the snapshots the solve did not reach (``SphereSettings.max_triangles``)."""
        E = np.asarray(E, dtype=float).reshape(3, -1)

        def f(y):
            # the particles' own per-token distance, free of the cancellation in 2 − 2|Px|: a cluster of width 1e-9
            # keeps its digits
            return projection.squared_distance_to_great_sphere(y, E)

        reached = [self.integrate(k, f, n) for k in range(len(self.meshes))]
        return np.sqrt(np.concatenate([reached, np.full(self.times.size - len(reached), np.nan)]))


def snapshot_nodes(mesh: SphereMesh, n: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes (triangle·node, 3) and masses of the mesh's density: the n × n rule on every triangle,
    each triangle's node masses summing exactly to its mass."""
    nodes, weights = triangle_nodes(mesh.points, mesh.triangles, n)
    a, b, c = (mesh.log_density[mesh.triangles[:, k]] for k in range(3))
    # ℓ at the nodes is barycentric-linear in the rule's own barycentric coordinates
    bary = SUB_BARY[n, : SUB_COUNT[n]]
    ell = bary[None, :, 0] * a[:, None] + bary[None, :, 1] * b[:, None] + bary[None, :, 2] * c[:, None]
    log_w = np.log(weights) + ell
    top = log_w.max(axis=1, keepdims=True)
    share = np.exp(log_w - top)
    share /= share.sum(axis=1, keepdims=True)
    return nodes.reshape(-1, 3), (share * np.exp(mesh.log_mass)[:, None]).reshape(-1)


# ---------------------------------------------------------------------------------------------------------------
# the initial measure and the checks made before any work


def initial_mesh(measure: str, params: dict, level: int) -> SphereMesh:
    """The icosphere of ``level`` carrying ρ0 (masses by the 8 × 8 rule on every triangle, scaled by the common factor
    that makes them sum to 1, which ρ0 does: the rule's error, below 1e-10 on the tests' densities, is not left to
    pass for mass)."""
    mesh = mesh_from_density(level, log_density0(measure, params))
    mesh.log_mass -= np.logaddexp.reduce(mesh.log_mass)
    return mesh


def cap_radii(mesh: SphereMesh) -> np.ndarray:
    """Radius (rad) of every triangle's bounding cap: the largest angle from its normalised centroid to a vertex."""
    corners = mesh.points[mesh.triangles]  # (triangle, 3, 3)
    centre = corners.sum(axis=1)
    centre /= np.linalg.norm(centre, axis=1, keepdims=True)
    cross = np.linalg.norm(np.cross(centre[:, None, :], corners), axis=-1)
    return np.arctan2(cross, np.einsum("tj,tkj->tk", centre, corners)).max(axis=1)


def check_resolution(
    mesh: SphereMesh, B: np.ndarray, beta: float, variation: float, depth: float, edge: float | None = None
) -> None:
    """MeshTooCoarse unless the triangles can be integrated by the softmax where they are kept: a triangle of cap
    radius r at an angle up to sqrt(2·depth/κ) from the kernel's centre sees κ⟨b̂, y⟩ vary by at most
    2r·sqrt(2·depth·κ) + κr², which must stay below MAX_SUBDIVISION·variation at the largest κ = β σ_max(B). With
    a remeshing target ``edge`` the triangles may grow to edges of 1.5·edge (split ratio), caps of radius up to
    edge (two thirds of the longest median): that is checked too. A screening test, not a proof: the triangles'
    ℓ-range and kept triangles beyond that angle (when the proven lower bound comes from far away) can still
    make the softmax refuse a triangle mid-run, naming it and the time."""
    radius = max(float(cap_radii(mesh).max()), edge or 0.0)
    needed = subdivision_needed(radius, B, beta, depth)
    if needed > MAX_SUBDIVISION * variation:
        raise MeshTooCoarse(
            f"S² mean field: at beta = {beta:g} the kernel is {kernel_width(B, beta):.3g} rad wide and the mesh's "
            f"largest triangle (cap radius {radius:.3g} rad) would need {needed / variation:.0f} sub-triangles per "
            f"edge, more than {MAX_SUBDIVISION}; raise the mesh level (each level halves the edges) or lower the "
            "remeshing target edge"
        )


def reference_settings(level: int, max_triangles: int | None, variation: float = DEFAULT_VARIATION) -> SphereSettings:
    """The pipeline's settings for a reference started on the icosphere of ``level``, the softmax at ``variation``
    (``sphere_levels.reference_variation``: finer on a level coarser than the kernel)."""
    return SphereSettings(
        variation=variation,
        edge=reference_edge(level),
        depth=REFERENCE_DEPTH,
        rtol=REFERENCE_RTOL,
        atol=REFERENCE_RTOL * 1e-2,
        remesh_every=REFERENCE_REMESH_EVERY,
        max_triangles=max_triangles,
        aggregate=True,
        sources=True,
    )


def check_inputs(B, V, beta: float, times, settings: SphereSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """B, V, times checked (ValueError naming the problem) before any work."""
    B, V = np.asarray(B, dtype=float), np.asarray(V, dtype=float)
    for name, M in (("B", B), ("V", V)):
        if M.shape != (3, 3) or not np.all(np.isfinite(M)):
            raise ValueError(f"S² mean field: {name} must be a finite 3×3 matrix, got shape {M.shape}")
    singular = np.linalg.svd(B, compute_uv=False)
    if singular[-1] <= B_CONDITION * singular[0]:
        raise ValueError(
            f"S² mean field: B is not invertible (singular values {singular.tolist()}): the softmax's centre "
            "Bᵀx/|Bᵀx| is undefined where Bᵀx = 0 (Assumption 1)"
        )
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"S² mean field: beta must be finite and > 0, got {beta!r}")
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size == 0 or not np.all(np.isfinite(times)) or times[0] < 0:
        raise ValueError("S² mean field: times must be a non-empty 1-D array of finite times ≥ 0")
    if np.any(np.diff(times) < 0):
        raise ValueError("S² mean field: times must be non-decreasing")
    check_settings(settings, times)
    return B, V, times


#: the Runge–Kutta pairs a solve may take (``SphereSettings.integrator``): Dormand–Prince 8(5,3) and 5(4)
INTEGRATORS = {"DOP853": DOP853, "RK45": RK45}
#: most stops (remeshings) one solve may make: a remesh_every out of scale with the horizon is refused
MAX_STOPS = 100_000
#: a stretch between stops on which the softmax finds a triangle too coarse for β is halved (a remeshing inserted
#: halfway) while it is longer than remesh_every·SHORTEST_STRETCH; a shorter one that still fails stops the solve
#: with ``MeshTooCoarse``
SHORTEST_STRETCH = 1.0 / 64


def check_settings(settings: SphereSettings, times: np.ndarray) -> None:
    """ValueError naming the first setting out of range (the softmax's own checks included), before any work."""
    _check_softmax_settings(np.eye(3), 1.0, float(settings.variation), float(settings.depth))
    if not (math.isfinite(settings.remesh_every) and settings.remesh_every > 0):
        raise ValueError(f"S² mean field: remesh_every must be finite and > 0, got {settings.remesh_every!r}")
    if times[-1] / settings.remesh_every > MAX_STOPS:
        raise ValueError(
            f"S² mean field: horizon {times[-1]:g} over remesh_every {settings.remesh_every:g} makes more than "
            f"{MAX_STOPS} stops"
        )
    if not (0 < settings.rtol < 1 and 0 < settings.atol < 1):
        raise ValueError(f"S² mean field: rtol and atol must lie in (0, 1), got {settings.rtol!r}, {settings.atol!r}")
    if settings.edge is not None and not (math.isfinite(settings.edge) and 0 < settings.edge < 1):
        raise ValueError(f"S² mean field: edge must lie in (0, 1) rad, got {settings.edge!r}")
    if settings.integrator not in INTEGRATORS:
        raise ValueError(f"S² mean field: integrator must be one of {sorted(INTEGRATORS)}, not {settings.integrator!r}")
    if settings.max_triangles is not None and not (
        isinstance(settings.max_triangles, (int, np.integer)) and settings.max_triangles > 0
    ):
        raise ValueError(f"S² mean field: max_triangles must be a positive integer, got {settings.max_triangles!r}")


def check_covers_sphere(mesh: SphereMesh) -> None:
    """ValueError unless the mesh is a closed surface covering S² once with mass 1: every edge in exactly two
    triangles, once in each direction (a closed, consistently oriented surface), Euler characteristic 2, solid
    angles summing to 4π, total mass 1 (a hole, a doubled sheet, a crack or an unnormalised ρ0 fail)."""
    tri = mesh.triangles
    directed = np.concatenate([tri[:, [0, 1]], tri[:, [1, 2]], tri[:, [2, 0]]])
    keys = directed[:, 0].astype(np.int64) * (mesh.points.shape[0] + 1) + directed[:, 1]
    reverse = directed[:, 1].astype(np.int64) * (mesh.points.shape[0] + 1) + directed[:, 0]
    if np.unique(keys).size != keys.size or not np.all(np.isin(reverse, keys)):
        raise ValueError(
            "S² mean field: the mesh is not a closed surface (an edge is not shared by exactly two triangles)"
        )
    used = np.unique(tri).size
    if used - keys.size // 2 + tri.shape[0] != 2:
        raise ValueError("S² mean field: the mesh's Euler characteristic is not 2 (it is not one sphere)")
    a, b, c = (mesh.points[tri[:, k]] for k in range(3))
    solid = float(spherical_area(a, b, c).sum())
    if abs(solid - 4 * math.pi) > 1e-9:
        raise ValueError(f"S² mean field: the triangles' solid angles sum to {solid:.12g}, not 4π: the mesh overlaps")
    total = float(np.exp(mesh.log_mass).sum())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"S² mean field: the triangles' masses sum to {total:.12g}, not 1")


# ---------------------------------------------------------------------------------------------------------------
# the dynamics


def _field(mesh: SphereMesh, B, V, beta, settings: SphereSettings, tracer_count: int, counter: list):
    """The right-hand side of (vertices, ℓ, tracers) on the fixed triangles of ``mesh``."""
    n = mesh.points.shape[0]

    def rhs(_t, y):
        counter[0] += 1
        points = y[: 3 * n].reshape(n, 3)
        points = points / np.linalg.norm(points, axis=1, keepdims=True)
        tracers = y[4 * n :].reshape(tracer_count, 3)
        tracers = tracers / np.linalg.norm(tracers, axis=1, keepdims=True)
        current = SphereMesh(points, y[3 * n : 4 * n], mesh.triangles, mesh.log_mass)
        queries = np.concatenate([points, tracers])
        if settings.aggregate:
            v, div, _ = aggregated_field(
                current, B, V, beta, queries, settings.variation, settings.depth, sources=settings.sources
            )
        else:
            exact = exact_softmax(current, B, beta, settings.variation, log_normalisers(current), settings.sources)
            v, div = velocity_divergence(queries, exact(queries, settings.depth), B, V, beta)
        return np.concatenate([v[:n].ravel(), -div[:n], v[n:].ravel()])

    return rhs


def _pack(mesh: SphereMesh, tracers: np.ndarray) -> np.ndarray:
    return np.concatenate([mesh.points.ravel(), mesh.log_density, tracers.ravel()])


def _unpack(y: np.ndarray, mesh: SphereMesh, tracer_count: int) -> tuple[SphereMesh, np.ndarray]:
    n = mesh.points.shape[0]
    points = y[: 3 * n].reshape(n, 3)
    tracers = y[4 * n :].reshape(tracer_count, 3)
    moved = SphereMesh(
        points / np.linalg.norm(points, axis=1, keepdims=True), y[3 * n : 4 * n].copy(), mesh.triangles, mesh.log_mass
    )
    return moved, tracers / np.linalg.norm(tracers, axis=1, keepdims=True)


def folded(mesh: SphereMesh) -> tuple[np.ndarray, float]:
    """(inverted, solid-angle excess): which triangles the flow has turned inside out (clockwise seen from outside)
    and by how much the triangles' solid angles exceed 4π. A mesh that covers S² once has neither; a fold (the flow
    unresolved at the mesh's edge length, in the tail first) makes the mesh overlap itself there, and remeshing
    only splits it further."""
    tri = mesh.triangles
    inverted = orientation(mesh.points, tri) < 0
    a, b, c = (mesh.points[tri[:, k]] for k in range(3))
    return inverted, float(spherical_area(a, b, c).sum() - 4 * math.pi)


def fold_w2(solution: SphereMeanFieldSolution) -> np.ndarray:
    """Per snapshot, a bound on the W2 the mesh's folds have cost by then: every fold repair before it moved mass
    only inside its region (``sphere_folds``: sqrt(mass)·diameter each, added by the triangle inequality), and the
    mass still inside out may sit anywhere (2·sqrt(mass)). The flow's growth of earlier perturbations is not in it."""
    d = solution.diagnostics
    return d.get("repaired_w2", np.zeros_like(d["folded_mass"])) + 2.0 * np.sqrt(d["folded_mass"])


def _mesh_diagnostics(mesh: SphereMesh) -> dict:
    log_c = log_normalisers(mesh)
    inverted, excess = folded(mesh)
    return {
        "triangles": int(mesh.triangles.shape[0]),
        "max_abs_log_c": float(np.abs(log_c).max()),
        "longest_edge": float(edge_lengths(mesh.points, mesh.triangles).max()),
        "total_mass": float(np.exp(mesh.log_mass).sum()),
        "inverted": int(inverted.sum()),
        "folded_mass": float(np.exp(mesh.log_mass[inverted]).sum()),
        "solid_angle_excess": excess,
    }


def repair_and_adapt(mesh: SphereMesh, edge: float) -> tuple[SphereMesh, dict]:
    """The solver's remeshing: folds repaired (``sphere_folds``), then the mesh adapted to the edge length
    (``sphere_remesh.adapt``); the counts of both (the repair's prefixed ``fold_``)."""
    mesh, repairs = repair_folds(mesh)
    mesh, counts = adapt(mesh, edge)
    return mesh, {**counts, **{f"fold_{key}": value for key, value in repairs.items()}}


def _checked_tracers(tracers0: np.ndarray | None) -> np.ndarray:
    """The tracers (…, token, 3) as a float array ((0, 3) when None); ValueError unless finite and non-zero."""
    tracers0 = np.zeros((0, 3)) if tracers0 is None else np.asarray(tracers0, dtype=float)
    if tracers0.ndim < 2 or tracers0.shape[-1] != 3 or not np.all(np.isfinite(tracers0)):
        raise ValueError(f"S² mean field: tracers must be finite (…, token, 3), got shape {tracers0.shape}")
    if tracers0.size and not np.all(np.linalg.norm(tracers0, axis=-1) > 0):
        raise ValueError("S² mean field: a tracer is the zero vector (tracers are points of the sphere)")
    return tracers0


def _advance(march: March, stop: float, B, V, beta: float, settings: SphereSettings, times, progress) -> None:
    """Move the mesh and the tracers from ``march.t`` to ``stop`` on the mesh's fixed triangles, recording a
    snapshot at every time of ``times`` strictly between them from the steps' dense output, the mesh moved there
    and not remeshed (MeshTooCoarse, the march unchanged and nothing recorded, where the flow stretches a triangle
    too far for the softmax on the way)."""
    rhs = _field(march.mesh, B, V, beta, settings, march.tracers.shape[0], march.nfev)
    inside = times[(times > march.t) & (times < stop)]
    tolerances, method = (settings.rtol, settings.atol), INTEGRATORS[settings.integrator]
    y, taken, march.step, at = _advance_edges(
        rhs, march.t, stop, _pack(march.mesh, march.tracers), *tolerances, march.step, inside, method
    )
    march.steps += taken  # the snapshots read below report the stretch's steps, as its evaluations
    for t, state in zip(inside, at):
        _record(march, *_unpack(state, march.mesh, march.tracers.shape[0]), float(t), progress)
    march.mesh, march.tracers = _unpack(y, march.mesh, march.tracers.shape[0])
    march.t = stop


def _halfway(err: MeshTooCoarse, t: float, stop: float, settings: SphereSettings, remeshed: bool) -> float:
    """The stop to insert halfway through the stretch t … stop on which the softmax refused a triangle; the refusal,
    naming the stretch, where nothing remeshes or the stretch is already as short as ``SHORTEST_STRETCH`` allows."""
    # the flow stretched a triangle beyond what the softmax integrates at this β before the next remeshing (in the
    # tail, where the flow splits towards two clusters): remesh halfway and try again
    if not remeshed or stop - t <= settings.remesh_every * SHORTEST_STRETCH:
        raise MeshTooCoarse(f"{err} (between t = {t:g} and {stop:g})") from None
    return 0.5 * (t + stop)


def _record(march: March, mesh: SphereMesh, tracers: np.ndarray, t: float, progress) -> None:
    """Record the snapshot (``mesh``, ``tracers``) at t and report it to ``progress``."""
    march.meshes.append(mesh.copy())
    march.paths.append(tracers.copy())
    march.at.append(t)
    march.diagnostics.append({**_mesh_diagnostics(mesh), "repaired_w2": march.repaired_w2})
    if progress is not None:
        progress(t, {**march.diagnostics[-1], "nfev": march.nfev[0], "steps": march.steps})


def _at_stop(march: March, stop: float, times: np.ndarray, remesh, progress) -> None:
    """At a stop: remesh (when a remeshing is given), then record a snapshot for every time equal to the stop."""
    if remesh is not None:
        march.mesh, counts = remesh(march.mesh, march.t)
        march.remeshings += 1
        march.repaired_w2 += counts.get("fold_w2_moved", 0.0)
    for _ in range(int(np.sum(times == stop))):
        _record(march, march.mesh, march.tracers, float(stop), progress)


def _solution(march: March, beta: float, times: np.ndarray, tracers0: np.ndarray) -> SphereMeanFieldSolution:
    """The solution from the snapshots recorded: the tracers NaN at the snapshots not reached, in the layout of
    ``tracers0`` (…, token, 3) with a time axis before the token's; None when no tracers were given."""
    resolved_until = float(times[march.reached - 1])
    times = times[march.first :]  # a resumed solve returns the snapshots after its state
    paths = march.paths + [np.full_like(march.tracers, np.nan)] * (times.size - len(march.paths))
    trajectory = np.stack(paths, axis=0).reshape((times.size, *tracers0.shape[:-1], 3))
    # (time, …, token, 3) → (…, time, token, 3), the package's layout
    trajectory = np.moveaxis(trajectory, 0, -3)
    return SphereMeanFieldSolution(
        beta,
        times,
        march.meshes,
        trajectory if tracers0.size else None,
        info={
            "nfev": march.nfev[0],
            "steps": march.steps,
            "seconds": _time.perf_counter() - march.start,
            "remeshings": march.remeshings,
            "remesh_halvings": march.halvings,
            "resolved_until": resolved_until,
            "stopped": march.stopped,
        },
        # none where a resumed solve ended before its first snapshot
        diagnostics={key: np.array([d[key] for d in march.diagnostics]) for key in next(iter(march.diagnostics), {})},
    )


def solve(
    B,
    V,
    beta: float,
    times,
    mesh0: SphereMesh,
    tracers0: np.ndarray | None = None,
    settings: SphereSettings = SphereSettings(),
    remesh: Callable[[SphereMesh, float], tuple[SphereMesh, dict]] | None = None,
    progress: Callable[[float, dict], None] | None = None,
    checkpoint: Callable[[Resumable], None] | None = None,
    resume: Resumable | None = None,
) -> SphereMeanFieldSolution:
    """Move ``mesh0`` (ρ0) and the tracers (…, token, 3) with the mean-field velocity to every time in ``times``.

    Every input is checked before any work (``check_inputs``, ``check_resolution``, ``SphereMesh.check``).
    ``remesh(mesh, t)`` is called at every stop (every ``settings.remesh_every`` and the last time:
    ``remesh_stops``; a snapshot between two stops is read from the steps' dense output, the mesh moved there and
    not remeshed, so the snapshots asked for leave the solution unchanged) and returns the new mesh and its counts
    (default: ``repair_and_adapt`` to ``settings.edge`` when it is set); a stretch on which the flow stretches a
    triangle too far for the softmax at β is integrated again from its start with a remeshing halfway
    (``info["remesh_halvings"]`` counts them), while the stretch is longer than
    ``remesh_every·SHORTEST_STRETCH``;
    ``progress(t, info)`` at every snapshot; ``checkpoint(state)`` at every stop the solve goes on from, and once
    where it ends (``state.final``: it hands over the last snapshots and resumes nothing), with a ``Resumable``;
    ``resume=state`` (the same B, V, β, times, settings and remeshing; ``mesh0`` and ``tracers0`` give only the
    layout then) goes on from it, and its solution holds the snapshots after it."""
    B, V, times = check_inputs(B, V, float(beta), times, settings)
    mesh0.check()
    check_covers_sphere(mesh0)
    check_resolution(mesh0, B, float(beta), settings.variation, settings.depth, settings.edge)
    tracers0 = _checked_tracers(tracers0)
    if remesh is None and settings.edge is not None:
        remesh = lambda m, _t: repair_and_adapt(m, settings.edge)  # noqa: E731
    flat = tracers0.reshape(-1, 3)
    if resume is None:
        march = March(mesh0.copy(), flat / np.linalg.norm(flat, axis=1, keepdims=True), start=_time.perf_counter())
    else:
        march = resumed(resume, times, flat)
    stops = [s for s in remesh_stops(times, settings.remesh_every) if resume is None or s > march.t]
    k = 0
    while k < len(stops):
        stop = stops[k]
        if stop > march.t and not _advanced(march, stops, k, (B, V, float(beta)), settings, times, progress, remesh):
            if march.stopped:
                break
            continue  # a stop inserted halfway: integrate again from the stretch's start
        k += 1
        _at_stop(march, stop, times, remesh, progress)
        # the triangles change only at stops; a solve stops once it has a snapshot to end with, and one that has
        # reached its last time has not stopped
        too_many = settings.max_triangles and march.mesh.triangles.shape[0] > settings.max_triangles
        if too_many and march.reached and k < len(stops):
            march.stopped = f"more than max_triangles = {settings.max_triangles} triangles at t = {march.t:g}"
            break
        if checkpoint is not None and k < len(stops):
            checkpoint(march.resumable())
    if checkpoint is not None:
        checkpoint(march.resumable(final=True))
    return _solution(march, float(beta), times, tracers0)


def _advanced(march: March, stops: list, k: int, problem: tuple, settings: SphereSettings, times, progress,
              remesh) -> bool:  # fmt: skip
    """Whether the march reached ``stops[k]``; if not, either a stop was inserted halfway (``_halfway``) or the solve
    ends where it is (``_kept``: ``march.stopped`` says why); otherwise the error reaches the caller."""
    try:
        _advance(march, float(stops[k]), *problem, settings, times, progress)
        return True
    except MeshTooCoarse as err:
        try:
            stops.insert(k, _halfway(err, march.t, float(stops[k]), settings, remesh is not None))
        except MeshTooCoarse as final:
            if not _kept(march, settings, final):
                raise
            return False
        march.halvings += 1
        return False
    except StepUnderflow as err:
        if not _kept(march, settings, err):
            raise
        return False


def _kept(march: March, settings: SphereSettings, err: Exception) -> bool:
    """Whether a solve that cannot go on ends here with what it reached (``settings.keep_on_failure`` and a
    snapshot to end with), the reason recorded in the march."""
    if not (settings.keep_on_failure and march.reached):
        return False
    march.stopped = f"{err} (after t = {march.t:g})"
    return True
