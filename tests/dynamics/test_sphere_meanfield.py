"""The general S² mean-field solver: refusals before any work, mass and tracers, and its answers against independent
references: converged particles at β = 10 (a quasi-uniform lattice, the package's dense kernel) and the
axisymmetric one-dimensional solver at β = 100 (docs/sphere_mean_field.md)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import scipy.integrate

from lowtemp.dynamics import (
    integrate,
    kernels,
    meanfield,
    reduction,
    sphere_levels,
    sphere_meanfield,
    sphere_mesh,
    sphere_remesh,
)

# the `concentration` experiment's matrices (rounded): A = VBᵀ symmetric part with eigenvalues ≈ 1.5, 0.6, 0.5
B = np.array([[0.9237, -0.0859, 0.2192], [-0.1410, 0.7233, -0.1998], [0.4826, -0.2931, 1.3637]])
V = np.array([[0.6497, -0.0120, -0.1638], [-0.0120, 0.8092, 0.0595], [-0.1638, 0.0595, 1.1411]])


def leading_axis() -> np.ndarray:
    A = V @ B.T
    w, U = np.linalg.eigh(0.5 * (A + A.T))
    return U[:, -1]


def fibonacci_lattice(n: int) -> np.ndarray:
    """n quasi-uniform points on S² (the spiral lattice): quadrature error ~1/n on smooth integrands."""
    i = np.arange(n) + 0.5
    z = 1.0 - 2.0 * i / n
    phi = math.pi * (1.0 + 5**0.5) * i
    r = np.sqrt(1.0 - z * z)
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def distance_to_axis(X: np.ndarray, u: np.ndarray) -> float:
    p = np.abs(X.reshape(-1, 3) @ u)
    return float(np.sqrt(np.mean(2.0 * (1.0 - p * p) / (1.0 + p))))


UNIFORM = sphere_meanfield.initial_mesh("uniform", {}, 2)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"B": np.diag([1.0, 1.0, 1e-12])}, ValueError, "B is not invertible"),
        ({"B": np.ones((2, 2))}, ValueError, "B must be a finite 3×3"),
        ({"V": np.full((3, 3), np.nan)}, ValueError, "V must be a finite 3×3"),
        ({"beta": -1.0}, ValueError, "beta must be finite and > 0"),
        ({"times": [0.0, 2.0, 1.0]}, ValueError, "non-decreasing"),
        ({"times": []}, ValueError, "non-empty"),
        ({"beta": 1e5}, sphere_mesh.MeshTooCoarse, r"beta = 100000 the kernel is .* more than 256; raise the mesh"),
        ({"tracers0": np.ones((4, 2))}, ValueError, "tracers must be finite"),
        ({"tracers0": np.ones(3)}, ValueError, "tracers must be finite"),
        ({"tracers0": np.array([[1.0, 0, 0], [0, 0, 0]])}, ValueError, "a tracer is the zero vector"),
        ({"settings": sphere_meanfield.SphereSettings(remesh_every=0.0)}, ValueError, "remesh_every"),
        ({"settings": sphere_meanfield.SphereSettings(remesh_every=1e-7)}, ValueError, "stops"),
        ({"settings": sphere_meanfield.SphereSettings(depth=-1.0)}, ValueError, "depth must be at least 5"),
        ({"settings": sphere_meanfield.SphereSettings(variation=0.0)}, ValueError, "variation must be positive"),
        ({"settings": sphere_meanfield.SphereSettings(rtol=1e300, atol=1e300)}, ValueError, "rtol and atol"),
        ({"settings": sphere_meanfield.SphereSettings(rtol=float("inf"))}, ValueError, "rtol and atol"),
        ({"settings": sphere_meanfield.SphereSettings(edge=-0.1)}, ValueError, "edge must lie"),
        ({"settings": sphere_meanfield.SphereSettings(max_triangles=0)}, ValueError, "max_triangles"),
        ({"settings": sphere_meanfield.SphereSettings(integrator="Euler")}, ValueError, "integrator must be one of"),
    ],
)
def test_bad_input_is_refused_before_any_work(kwargs, error, message):
    """Every bad input names its problem before a single field evaluation (progress is never called)."""
    calls = []
    args = {"B": B, "V": V, "beta": 10.0, "times": [0.0, 0.1], "mesh0": UNIFORM, **kwargs}
    with pytest.raises(error, match=message):
        sphere_meanfield.solve(progress=lambda t, info: calls.append(t), **args)
    assert calls == []


@pytest.mark.parametrize(
    ("measure", "params", "message"),
    [
        ("atoms", {"points": [[1, 0, 0]]}, "no positive smooth density"),
        ("cap", {"center": [1, 0, 0], "angle": 30}, "no positive smooth density"),
        ("vmf_mixture", {"kappas": [2.0], "means": [[0.0, 0.0, 0.0]]}, "finite non-zero vector"),
    ],
)
def test_measures_without_a_positive_density_are_refused(measure, params, message):
    with pytest.raises(ValueError, match=message):
        sphere_meanfield.initial_mesh(measure, params, 2)


def doubled(mesh):
    """Two copies of the sphere on the same vertices: every edge four times."""
    out = mesh.copy()
    out.triangles = np.concatenate([mesh.triangles, mesh.triangles])
    out.log_mass = np.concatenate([mesh.log_mass, mesh.log_mass]) - math.log(2)
    return out


def holed(mesh):
    """One triangle removed, the others' masses scaled back to 1."""
    out = mesh.copy()
    out.triangles, out.log_mass = mesh.triangles[1:], mesh.log_mass[1:] - np.logaddexp.reduce(mesh.log_mass[1:])
    return out


def cracked(mesh):
    """A vertex duplicated and one triangle moved onto the copy: the surface opens along two edges."""
    out = mesh.copy()
    out.points = np.concatenate([mesh.points, mesh.points[mesh.triangles[0, :1]]])
    out.log_density = np.concatenate([mesh.log_density, mesh.log_density[mesh.triangles[0, :1]]])
    out.triangles = mesh.triangles.copy()
    out.triangles[0, 0] = mesh.points.shape[0]
    return out


def heavy(mesh):
    out = mesh.copy()
    out.log_mass = mesh.log_mass + 3.0
    return out


@pytest.mark.parametrize(
    ("broken", "message"),
    [(doubled, "not a closed surface"), (holed, "not a closed surface"), (cracked, "not a closed surface"),
     (heavy, "masses sum to")],
)  # fmt: skip
def test_a_mesh_that_does_not_cover_the_sphere_once_is_refused(broken, message):
    """A doubled sheet, a hole, a crack, a total mass of e³: each refused before any work; the mesh they were made
    from is accepted (the other tests)."""
    with pytest.raises(ValueError, match=message):
        sphere_meanfield.solve(B, V, 10.0, [0.0, 0.1], broken(UNIFORM))


def test_flipped_mesh_is_refused():
    broken = UNIFORM.copy()
    broken.triangles[3] = broken.triangles[3, [1, 0, 2]]
    with pytest.raises(ValueError, match="counter-clockwise"):
        sphere_meanfield.solve(B, V, 10.0, [0.0, 0.1], broken)


def test_vmf_initial_density_is_normalised():
    """The vMF mixture put on the mesh holds mass 1 and its mean is the mixture's closed-form mean."""
    params = {"kappas": [2.0, 5.0], "means": [[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]], "weights": [0.3, 0.7]}
    mesh = sphere_meanfield.initial_mesh("vmf_mixture", params, 4)
    sol = sphere_meanfield.SphereMeanFieldSolution(10.0, np.zeros(1), [mesh], None)
    assert sol.integrate(0, lambda y: np.ones(y.shape[:-1])) == pytest.approx(1.0, abs=1e-12)

    def langevin(k):
        return 1 / math.tanh(k) - 1 / k

    expected = 0.3 * langevin(2.0) * np.array([1.0, 0, 0]) + 0.7 * langevin(5.0) * np.array([0, 0.6, 0.8])
    mean = np.array([sol.integrate(0, lambda y, i=i: y[..., i]) for i in range(3)])
    assert np.abs(mean - expected).max() < 1e-6


# ---------------------------------------------------------------------------------------------------------------
# against independent references

TIMES = np.array([0.0, 0.5, 1.0])


def mesh_distances(B, V, beta, level, axis, times=TIMES):
    """sqrt(∫ (2 − 2|⟨x, axis⟩|) dρ_t) of the mesh solution from the uniform law on the icosphere of ``level``,
    remeshed to 1.5 times its initial longest edge."""
    mesh = sphere_meanfield.initial_mesh("uniform", {}, level)
    edge = 1.5 * float(sphere_mesh.edge_lengths(mesh.points, mesh.triangles).max())
    sol = sphere_meanfield.solve(B, V, beta, times, mesh, settings=sphere_meanfield.SphereSettings(edge=edge))
    assert np.abs(sol.diagnostics["total_mass"] - 1.0).max() < 1e-13  # remeshing keeps the mass
    return sol.distance_to_eigenspace(axis)


def particle_distances(beta, n=4096, dt=0.05, times=TIMES):
    """The same from n particles on the spiral lattice (the package's dense kernel, RK4 at dt): within ~3e-4 of
    the mean field at β = 10 to t = 1 (N = 4096 and 16 384 agree to that)."""
    X = fibonacci_lattice(n)[None]
    u = leading_axis()
    out = [distance_to_axis(X, u)]
    for t0, t1 in zip(times[:-1], times[1:]):
        for _ in range(int(round((t1 - t0) / dt))):
            X = integrate.rk4_step(lambda Y: kernels.dense_field(Y, B, V, beta), X, dt)
        out.append(distance_to_axis(X, u))
    return np.array(out)


def test_mesh_converges_to_particles_at_beta_10():
    """β = 10 from the uniform law (`concentration`'s matrices): the mesh at level 3 within 2.5e-3 of the particles
    (measured 2.5e-4 at t = 0.5 and 9.8e-4 at t = 1), level 2 at least twice as far off (measured 4.2e-3 at t = 1:
    the error falls as the mesh is refined); the mesh at β = 20 is told apart from the particles at β = 10."""
    u = leading_axis()
    particles = particle_distances(10.0)
    fine = mesh_distances(B, V, 10.0, 3, u)
    coarse = mesh_distances(B, V, 10.0, 2, u)
    assert np.abs(fine - particles).max() < 2.5e-3, fine - particles
    assert abs(coarse[-1] - particles[-1]) > 2 * abs(fine[-1] - particles[-1])
    other_beta = mesh_distances(B, V, 20.0, 3, u)
    assert abs(other_beta[-1] - particles[-1]) > 2.5e-3


def test_axisymmetric_input_reproduces_the_one_dimensional_solver():
    """B, V and ρ0 symmetric about an axis e (A = 1.5 eeᵀ + 0.5(I − eeᵀ)): at β = 100 the mesh (level 4) gives the
    distance to ±e of the one-dimensional reference to 1e-4 (measured 2.4e-5 at t = 1); the reference at β = 90 is
    told apart."""
    e = np.array([0.3, -0.5, 0.8]) / math.sqrt(0.98)
    P = np.outer(e, e)
    Bax, Vax = 1.2 * P + 0.8 * (np.eye(3) - P), 1.25 * P + 0.625 * (np.eye(3) - P)
    red = reduction.reduce(Bax, Vax, "uniform", {})
    reference = meanfield.solve(red, 100.0, TIMES, width=0.02).distance_to_eigenspace(e)
    mesh = mesh_distances(Bax, Vax, 100.0, 4, e)
    assert np.abs(mesh - reference).max() < 1e-4, mesh - reference
    other_beta = meanfield.solve(red, 90.0, TIMES, width=0.02).distance_to_eigenspace(e)
    assert np.abs(mesh - other_beta).max() > 1e-4


def test_a_mesh_that_outgrows_max_triangles_stops_with_what_it_has():
    """With max_triangles below what remeshing makes by t = 1 the solve stops at the first stop above it that
    follows a snapshot: the later snapshots are NaN (distances and tracers) and info says how far it got; without
    the limit it runs on. Asked first for t = 0.6, after the remeshing at 0.5 that breaks the limit, it still
    records that snapshot and stops after it."""
    mesh = sphere_meanfield.initial_mesh("uniform", {}, 2)
    times = np.linspace(0.0, 1.0, 5)
    settings = sphere_meanfield.SphereSettings(edge=0.3, rtol=1e-4, atol=1e-6, max_triangles=330)
    tracers = fibonacci_lattice(16)
    sol = sphere_meanfield.solve(B, V, 10.0, times, mesh, tracers, settings=settings)
    reached = len(sol.meshes)
    assert 1 <= reached < times.size
    assert sol.meshes[-1].triangles.shape[0] > 330
    assert all(m.triangles.shape[0] <= 330 for m in sol.meshes[:-1])
    assert sol.info["resolved_until"] == times[reached - 1]
    d = sol.distance_to_eigenspace(leading_axis())
    assert np.all(np.isfinite(d[:reached])) and np.all(np.isnan(d[reached:]))
    assert sol.tracers.shape == (times.size, 16, 3)
    assert np.all(np.isfinite(sol.tracers[:reached])) and np.all(np.isnan(sol.tracers[reached:]))
    assert sol.info["stopped"] == f"more than max_triangles = 330 triangles at t = {sol.info['resolved_until']:g}"
    # a mesh above the limit at the last time has not stopped the solve: it reached every snapshot
    last = sphere_meanfield.solve(B, V, 10.0, times[:reached], mesh, None, settings=settings)
    assert len(last.meshes) == reached and last.info["stopped"] == ""
    assert np.abs(sol.tracers[0] - tracers).max() < 1e-15  # the flow map is the identity at t = 0
    unlimited = sphere_meanfield.solve(B, V, 10.0, times, mesh, settings=sphere_meanfield.SphereSettings(edge=0.3))
    assert len(unlimited.meshes) == times.size
    late = sphere_meanfield.solve(B, V, 10.0, [0.6, 1.0], mesh, tracers, settings=settings)
    assert len(late.meshes) == 1 and late.info["resolved_until"] == 0.6
    assert np.all(np.isfinite(late.tracers[0])) and np.all(np.isnan(late.tracers[1]))


def test_tracers_move_with_the_mesh_and_keep_the_layout():
    """Tracers (replica, token, 3) come back as (replica, time, token, 3); a tracer started on a vertex moves with
    it (the same field, the same integrator) while the mesh is not remeshed; a tracer given off the unit sphere is
    its direction. A solver that froze the tracers or left the time axis first fails this."""
    mesh = sphere_meanfield.initial_mesh("uniform", {}, 2)
    vertices = [17, 5, 40, 99]
    tracers = np.stack([mesh.points[vertices[:2]], 3.0 * mesh.points[vertices[2:]]])  # (2, 2, 3)
    times = np.array([0.0, 0.2, 0.4])
    sol = sphere_meanfield.solve(B, V, 10.0, times, mesh, tracers, settings=sphere_meanfield.SphereSettings())
    assert sol.tracers.shape == (2, 3, 2, 3)
    for k in range(times.size):
        moved = sol.meshes[k].points[vertices].reshape(2, 2, 3)
        assert np.abs(sol.tracers[:, k] - moved).max() < 1e-12
    assert np.abs(sol.tracers[:, -1] - sol.tracers[:, 0]).max() > 1e-2  # they did move


def test_distance_keeps_its_digits_for_a_narrow_cluster():
    """The distance to E = span(e₁) of a mesh squeezed into a cap of radius 1e-12 at angle ε = 1e-9 from e₁: ε to
    within 1e-3 relative; 2 − 2|⟨x, e₁⟩| written as it reads is 0 there (it keeps only rounding below 1e-8)."""
    eps = 1e-9
    target = np.array([math.cos(eps), math.sin(eps), 0.0])
    mesh = sphere_meanfield.initial_mesh("uniform", {}, 1).copy()
    squeezed = target + 1e-12 * mesh.points
    mesh.points = squeezed / np.linalg.norm(squeezed, axis=1, keepdims=True)
    sol = sphere_meanfield.SphereMeanFieldSolution(10.0, np.zeros(1), [mesh], None)
    assert sol.distance_to_eigenspace(np.eye(3)[:, :1])[0] == pytest.approx(eps, rel=1e-3)
    assert 2.0 - 2.0 * abs(target[0]) == 0.0  # what the cancelling form reads at this width


def test_folded_finds_a_vertex_pushed_across_its_neighbours():
    """A mesh covering S² once has no inverted triangle and no solid-angle excess; a vertex moved across the far edge
    of one of its triangles turns that triangle inside out and makes the mesh overlap itself (excess > 0)."""
    mesh = sphere_meanfield.initial_mesh("uniform", {}, 2)
    inverted, excess = sphere_meanfield.folded(mesh)
    assert not inverted.any() and abs(excess) < 1e-12
    a, b, c = mesh.triangles[0]
    pb, pc = mesh.points[b], mesh.points[c]
    normal = np.cross(pb, pc)
    normal /= np.linalg.norm(normal)
    pa = mesh.points[a]
    moved = pa - 2.2 * np.dot(pa, normal) * normal  # reflected across the great circle through b and c, and beyond
    mesh.points[a] = moved / np.linalg.norm(moved)
    inverted, excess = sphere_meanfield.folded(mesh)
    assert inverted[0] and excess > 1e-3


@pytest.fixture(scope="module")
def tail_folds():
    """`concentration`'s flow at β = 10 on the level-2 mesh to t = 7, remeshed every 0.5 with and without fold
    repair: the tail folds between t = 6 and 6.5 (docs/sphere_mean_field.md, "Folds")."""
    settings = dataclasses.replace(sphere_meanfield.reference_settings(2, None), remesh_every=0.5)
    runs = {}
    for name, remesh in (
        ("repaired", None),
        ("adapted only", lambda m, _t: sphere_remesh.adapt(m, settings.edge)),
    ):
        runs[name] = sphere_meanfield.solve(B, V, 10.0, [0.0, 7.0], UNIFORM, None, settings, remesh=remesh)
    return runs


def test_the_flow_folds_the_tail_when_folds_are_not_repaired(tail_folds):
    """The input the repair must fix: without it, triangles are inside out at t = 7 and the solid angles exceed 4π."""
    d = tail_folds["adapted only"].diagnostics
    assert d["inverted"][-1] > 0 and d["solid_angle_excess"][-1] > 1e-3 and d["repaired_w2"][-1] == 0.0


def test_the_solver_repairs_the_folds_it_makes(tail_folds):
    """With the default remeshing the folds are rebuilt at every stop: at t = 7 none is inside out, the mesh covers S²
    once, the mass is kept, and the W2 the repairs may have cost is counted (and small: the fold is in the tail)."""
    sol = tail_folds["repaired"]
    d = sol.diagnostics
    assert d["inverted"][-1] == 0 and abs(d["solid_angle_excess"][-1]) < 1e-12
    assert d["total_mass"][-1] == pytest.approx(1.0, rel=1e-12)
    assert 0.0 < sphere_meanfield.fold_w2(sol)[-1] < 0.01


def test_a_stretch_the_flow_makes_too_coarse_is_halved_until_it_is_not(monkeypatch):
    """At β = 31.6 with a remeshing only every 3 time units the flow stretches tail triangles beyond what the softmax
    integrates at that β before the next stop (it refuses them mid-step): the solve integrates that stretch again
    with a remeshing halfway, as often as needed, and ends with a mesh that covers S² once with mass 1. Without
    halvings (no stretch shorter than remesh_every may be tried) the same solve stops, naming the stretch."""
    settings = dataclasses.replace(sphere_meanfield.reference_settings(2, None), remesh_every=3.0)
    solution = sphere_meanfield.solve(B, V, 31.6, [0.0, 3.0], UNIFORM, None, settings)
    assert solution.info["remesh_halvings"] >= 1 and solution.info["resolved_until"] == 3.0
    sphere_meanfield.check_covers_sphere(solution.meshes[-1])
    assert not folded_triangles(solution.meshes[-1])
    monkeypatch.setattr(sphere_meanfield, "SHORTEST_STRETCH", 1.0)
    with pytest.raises(sphere_levels.MeshTooCoarse, match=r"between t = 0 and 3\)"):
        sphere_meanfield.solve(B, V, 31.6, [0.0, 3.0], UNIFORM, None, settings)


def test_a_solve_kept_on_failure_ends_with_the_snapshots_it_reached(monkeypatch):
    """The stretch of the test above that cannot be halved, asked at t = 0, 1.5 and 3 with a remeshing every 3:
    with ``keep_on_failure`` the solve ends with the snapshot at t = 0 (tracers and distances NaN after, the
    refusal in ``info["stopped"]``); without it the same solve raises. Asked from t = 1 on, there is no snapshot
    before the refused stretch to end with, and it raises either way."""
    settings = dataclasses.replace(sphere_meanfield.reference_settings(2, None), remesh_every=3.0)
    monkeypatch.setattr(sphere_meanfield, "SHORTEST_STRETCH", 1.0)
    times, tracers = [0.0, 1.5, 3.0], fibonacci_lattice(8)
    kept = sphere_meanfield.solve(
        B, V, 31.6, times, UNIFORM, tracers, dataclasses.replace(settings, keep_on_failure=True)
    )
    assert len(kept.meshes) == 1 and kept.info["resolved_until"] == 0.0
    assert "between t = 0 and 3)" in kept.info["stopped"] and "after t = 0" in kept.info["stopped"]
    assert np.all(np.isfinite(kept.tracers[:1])) and np.all(np.isnan(kept.tracers[1:]))
    assert np.all(np.isnan(kept.distance_to_eigenspace(leading_axis())[1:]))
    with pytest.raises(sphere_levels.MeshTooCoarse, match=r"between t = 0 and 3\)"):
        sphere_meanfield.solve(B, V, 31.6, times, UNIFORM, tracers, settings)
    with pytest.raises(sphere_levels.MeshTooCoarse, match=r"between t = 0 and 3\)"):
        sphere_meanfield.solve(
            B, V, 31.6, [1.0, 3.0], UNIFORM, None, dataclasses.replace(settings, keep_on_failure=True)
        )


def test_an_integrator_that_underflows_is_named_and_kept_on_failure(monkeypatch):
    """DOP853 on y' = y² from y(0) = 1 (blow-up at t = 1) fails on its step size: the stretch raises
    ``StepUnderflow`` naming where. A solve whose second stretch does so ends, with ``keep_on_failure``, with the
    snapshots before it and the integrator's message; without it the error reaches the caller."""
    with pytest.raises(meanfield.StepUnderflow, match="integrator failed at t = 1: Required step size"):
        meanfield._advance_edges(lambda _t, y: y**2, 0.0, 2.0, np.array([1.0]), 1e-8, 1e-10, None)
    real, calls = sphere_meanfield._advance_edges, []

    def failing_second(rhs, t0, t1, *rest):
        calls.append(t0)
        if len(calls) == 2:
            return real(lambda _t, y: y**2, 0.0, 2.0, np.ones(1), 1e-8, 1e-10, None)
        return real(rhs, t0, t1, *rest)

    monkeypatch.setattr(sphere_meanfield, "_advance_edges", failing_second)
    settings = sphere_meanfield.SphereSettings(edge=None, rtol=1e-4, atol=1e-6, remesh_every=0.5)
    with pytest.raises(meanfield.StepUnderflow):
        sphere_meanfield.solve(B, V, 10.0, [0.0, 0.5, 1.0], UNIFORM, None, settings)
    calls.clear()
    kept = sphere_meanfield.solve(
        B, V, 10.0, [0.0, 0.5, 1.0], UNIFORM, None, dataclasses.replace(settings, keep_on_failure=True)
    )
    assert kept.info["resolved_until"] == 0.5 and "integrator failed" in kept.info["stopped"]
    assert kept.info["stopped"].endswith("(after t = 0.5)")


def test_a_field_that_turns_nan_is_a_fault_even_kept_on_failure(monkeypatch):
    """SciPy rejects a step whose field is NaN until its step underflows, which would read as a resolution limit:
    ``_advance_edges`` names it ``NonFiniteField`` instead, and a solve kept on failure still raises it."""
    with pytest.raises(meanfield.NonFiniteField, match="not finite at t = "):
        meanfield._advance_edges(lambda t, y: np.full_like(y, np.nan) if t > 0.3 else -y, 0.0, 1.0, np.ones(3),
                                 1e-8, 1e-10, None)  # fmt: skip
    real = sphere_meanfield._field

    def turns_nan(*args):
        rhs = real(*args)
        return lambda t, y: rhs(t, y) * (np.nan if t > 0.6 else 1.0)

    monkeypatch.setattr(sphere_meanfield, "_field", turns_nan)
    settings = sphere_meanfield.SphereSettings(edge=None, rtol=1e-4, atol=1e-6, remesh_every=0.5, keep_on_failure=True)
    with pytest.raises(meanfield.NonFiniteField):
        sphere_meanfield.solve(B, V, 10.0, [0.0, 0.5, 1.0], UNIFORM, None, settings)


def test_a_solve_resumed_from_a_checkpoint_goes_on_bit_for_bit():
    """β = 10 from level 2 with the reference settings, snapshots every 0.25 to t = 2 and 16 tracers: the states
    handed out at every stop hand over each snapshot once; resumed from the state at t = 1 the solve gives the
    snapshots after it (meshes, tracers, distances, diagnostics and counts) exactly as the unstopped solve, and a
    state handed out before the first snapshot asked for resumes as well. A state resumed against other times, or
    other tracers, is refused before any work."""
    settings = sphere_meanfield.reference_settings(2, None)
    times, tracers = np.linspace(0.0, 2.0, 9), fibonacci_lattice(16)
    states = []
    whole = sphere_meanfield.solve(B, V, 10.0, times, UNIFORM, tracers, settings, checkpoint=states.append)
    assert [s.t for s in states] == list(times)  # every stop, the last (which resumes nothing) handing over the end
    assert [s.final for s in states] == [False] * 8 + [True]
    assert [t for s in states for t, _m, _x in s.new] == list(times)
    at_one = states[4]
    assert at_one.t == 1.0 and at_one.recorded == 5
    rest = sphere_meanfield.solve(B, V, 10.0, times, UNIFORM, tracers, settings, resume=at_one)
    np.testing.assert_array_equal(rest.times, times[5:])
    for a, b in zip(rest.meshes, whole.meshes[5:], strict=True):
        for name in ("points", "log_density", "triangles", "log_mass"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(rest.tracers, whole.tracers[5:])
    np.testing.assert_array_equal(
        rest.distance_to_eigenspace(leading_axis()), whole.distance_to_eigenspace(leading_axis())[5:]
    )
    for key in ("nfev", "steps", "remeshings", "remesh_halvings", "resolved_until", "stopped"):
        assert rest.info[key] == whole.info[key], key
    for key, values in whole.diagnostics.items():
        np.testing.assert_array_equal(rest.diagnostics[key], values[5:], err_msg=key)
    # a state handed out before the first snapshot asked for resumes too
    early, later = [], [0.5, 1.0]
    first = sphere_meanfield.solve(B, V, 10.0, later, UNIFORM, tracers, settings, checkpoint=early.append)
    assert early[0].t == 0.0 and early[0].recorded == 0
    again = sphere_meanfield.solve(B, V, 10.0, later, UNIFORM, tracers, settings, resume=early[0])
    np.testing.assert_array_equal(again.tracers, first.tracers)
    with pytest.raises(ValueError, match="recorded 5 snapshots, times has 9"):
        sphere_meanfield.solve(B, V, 10.0, np.linspace(0.0, 2.0, 17), UNIFORM, tracers, settings, resume=at_one)
    with pytest.raises(ValueError, match="does not resume times 0 … 1"):
        sphere_meanfield.solve(B, V, 10.0, times[:5], UNIFORM, tracers, settings, resume=at_one)
    with pytest.raises(ValueError, match="carries tracers"):
        sphere_meanfield.solve(B, V, 10.0, times, UNIFORM, tracers[:8], settings, resume=at_one)
    with pytest.raises(ValueError, match="the state at t = 2 is where its solve ended"):
        sphere_meanfield.solve(B, V, 10.0, times, UNIFORM, tracers, settings, resume=states[-1])


def test_a_solve_resumed_at_a_halfway_stop_goes_on_bit_for_bit_and_keeps_a_failure_before_its_first_snapshot(
    monkeypatch,
):
    """The halved stretches of β = 31.6 remeshed every 3 (above): every state handed out at a stop inserted halfway
    resumes to the unstopped solve's mesh at t = 3 exactly, with its halvings and fold repairs counted alike. A
    resumed solve whose first stretch the integrator cannot take ends, kept on failure, with no snapshot of its own
    and the reason, where the snapshots before its state are the caller's."""
    settings = dataclasses.replace(sphere_meanfield.reference_settings(2, None), remesh_every=3.0)
    states = []
    whole = sphere_meanfield.solve(B, V, 31.6, [0.0, 3.0], UNIFORM, None, settings, checkpoint=states.append)
    halfway = [s for s in states if 0.0 < s.t < 3.0 and not s.final]
    assert whole.info["remesh_halvings"] >= 1 and halfway
    for state in halfway:
        rest = sphere_meanfield.solve(B, V, 31.6, [0.0, 3.0], UNIFORM, None, settings, resume=state)
        for name in ("points", "log_density", "triangles", "log_mass"):
            np.testing.assert_array_equal(getattr(rest.meshes[-1], name), getattr(whole.meshes[-1], name))
        for key in ("nfev", "steps", "remeshings", "remesh_halvings"):
            assert rest.info[key] == whole.info[key], key
        np.testing.assert_array_equal(rest.diagnostics["repaired_w2"], whole.diagnostics["repaired_w2"][1:])

    def fails(*_args, **_kwargs):
        raise meanfield.StepUnderflow("the integrator failed at t = 1.6: Required step size is less than spacing")

    monkeypatch.setattr(sphere_meanfield, "_advance_edges", fails)
    kept = dataclasses.replace(settings, keep_on_failure=True)
    ended = sphere_meanfield.solve(B, V, 31.6, [0.0, 3.0], UNIFORM, None, kept, resume=halfway[0])
    assert ended.meshes == [] and ended.info["resolved_until"] == 0.0 and ended.diagnostics == {}
    assert ended.info["stopped"].startswith("the integrator failed at t = 1.6")
    with pytest.raises(meanfield.StepUnderflow):
        sphere_meanfield.solve(B, V, 31.6, [0.0, 3.0], UNIFORM, None, settings, resume=halfway[0])


def folded_triangles(mesh) -> int:
    return int(sphere_meanfield.folded(mesh)[0].sum())


def test_snapshots_between_remeshings_are_read_from_the_steps_and_cost_none():
    """Snapshots every 0.125 on a solve remeshed every 0.5 (β = 10, level 2): the stops, steps and end state are
    those of the same solve asked for t = 0.5 and 1 alone (bit for bit: a snapshot between two remeshings ends no
    step), and the snapshot at t = 0.25, read from the step's dense output, agrees with a solve that ends there to
    the integration's tolerance (rtol 1e-6: vertices and tracers within 5e-7, ℓ within 5e-6; measured 1.0e-7,
    7.4e-8 and 1.4e-6). A solver that stopped, or remeshed, at every snapshot fails the first; one that read a
    snapshot from the step's end the second."""
    settings = dataclasses.replace(sphere_meanfield.reference_settings(2, None), rtol=1e-6, atol=1e-8, remesh_every=0.5)
    tracers = fibonacci_lattice(16)
    dense = sphere_meanfield.solve(B, V, 10.0, np.linspace(0.0, 1.0, 9), UNIFORM, tracers, settings)
    sparse = sphere_meanfield.solve(B, V, 10.0, [0.0, 0.5, 1.0], UNIFORM, tracers, settings)
    assert dense.info["steps"] == sparse.info["steps"] and dense.info["remeshings"] == sparse.info["remeshings"]
    for a, b in ((dense.meshes[-1], sparse.meshes[-1]), (dense.meshes[4], sparse.meshes[1])):
        assert np.array_equal(a.points, b.points) and np.array_equal(a.log_density, b.log_density)
    assert np.array_equal(dense.tracers[-1], sparse.tracers[-1])
    ended = sphere_meanfield.solve(B, V, 10.0, [0.0, 0.25], UNIFORM, tracers, dataclasses.replace(settings, edge=None))
    read, stopped = dense.meshes[2], ended.meshes[-1]
    assert np.array_equal(read.triangles, stopped.triangles)  # both the mesh remeshed at t = 0, moved to 0.25
    assert np.abs(read.points - stopped.points).max() < 5e-7
    assert np.abs(read.log_density - stopped.log_density).max() < 5e-6
    assert np.abs(dense.tracers[2] - ended.tracers[-1]).max() < 5e-7


def test_the_reference_integrator_errs_far_less_than_the_levels_differ(monkeypatch):
    """The reference's time stepping (its integrator at its rtol, one step per stop where the tolerance allows) at
    β = 10 from level 2 to t = 2: its tracers within a tenth of the two levels' difference (levels 2 and 3, RMS per
    snapshot) of DOP853 at rtol 1e-8 on the same stops and level. A third-order pair at a loose tolerance (RK23 at
    rtol 0.3, one step per stop) is not."""
    times = np.linspace(0.0, 2.0, 9)
    tracers = fibonacci_lattice(64)

    def solved(level, **change):
        settings = dataclasses.replace(sphere_meanfield.reference_settings(level, None), **change)
        return sphere_meanfield.solve(
            B, V, 10.0, times, sphere_meanfield.initial_mesh("uniform", {}, level), tracers, settings
        ).tracers

    def rms(a, b):
        return np.sqrt(np.mean(np.sum((a - b) ** 2, axis=-1), axis=-1))[1:]

    reference, finer = solved(2), solved(3)
    tight = solved(2, integrator="DOP853", rtol=1e-8, atol=1e-10)
    assert np.all(rms(reference, tight) < 0.1 * rms(reference, finer)), (rms(reference, tight), rms(reference, finer))
    monkeypatch.setitem(sphere_meanfield.INTEGRATORS, "RK23", scipy.integrate.RK23)
    coarse = solved(2, integrator="RK23", rtol=0.3, atol=3e-3)
    assert not np.all(rms(coarse, tight) < 0.1 * rms(reference, finer))
