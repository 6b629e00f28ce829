"""Zero-temperature dry run of the ALE sphere mesh, where the answer is known.

The Lagrangian triangles of ``sphere_mesh`` moved by the zero-temperature field (Eq. 3) v(x) = P⊥(x) A x/|Bᵀx|
of the `concentration` experiment's matrices (config/config.yaml), from the uniform law: every vertex follows
dx/dt = v and carries ℓ = log ρ with dℓ/dt = −div_S v (closed form below, no softmax), RK4 at a fixed step, and
``sphere_remesh.adapt`` every ``--every`` time units with a target edge ``--fine`` within ``--radius`` of the
Laplace points ±y* = ±Bᵀu/|Bᵀu| (u the leading eigenvector of A) and ``--coarse`` elsewhere. Against the exact
solution (``lowtemp.model.exact``):

* W2(ρ_t, Π♯ρ0): Π♯ρ0 puts the masses of the hemispheres ⟨x, u⟩ ≷ 0 on ±u. The flow is odd (v(−x) = −v(x)), so
  ρ_t keeps half its mass on each side and W2² = ∫ (2 − 2|⟨y, u⟩|) dρ_t(y): on the mesh, a sum over the 7-point
  rule's nodes of every triangle; exactly, the time-changed linear flow integrated over x0 with ⟨x0, u⟩ = e^{−ζ}
  (Gauss–Legendre panels in ζ down to e^{−40}) and a periodic trapezoid rule in the azimuth;
* log ρ_t(y*): the mesh's reconstruction at y* against log ρ0 − ∫ div_S v along the backward characteristic.

Prints a Markdown table: triangles, worst aspect ratio, W2 (exact, relative error of the mesh with and without the
per-triangle mass normalisation), log ρ_t(y*) (exact, mesh − exact), and the CPU seconds of the remeshing.

usage: python studies/sphere_zero_temperature.py [--horizon 30] [--mode ale|split|none] ...
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from scipy.integrate import solve_ivp

from lowtemp.config import experiment
from lowtemp.dynamics import sphere_mesh, sphere_remap, sphere_remesh
from lowtemp.model import exact
from lowtemp.store import harness

ROOT = Path(__file__).resolve().parents[1]


def concentration_problem() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A (symmetrised VBᵀ), B, A's eigenvalues (descending) and eigenvectors (columns), and y* = Bᵀu/|Bᵀu|."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    M = experiment.build_matrices("concentration", config["experiments"]["concentration"], config["root_seed"])
    mu, U = np.linalg.eigh(M.A)
    mu, U = mu[::-1], U[:, ::-1]
    ystar = M.B.T @ U[:, 0]
    return M.A, M.B, mu, U, ystar / np.linalg.norm(ystar)


def velocity_and_divergence(X: np.ndarray, A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """v = P⊥(x) g and div_S v = tr(P⊥ Dg) − 2 g·x for g(x) = Ax/|Bᵀx|, Dg = A/n − (Ax)(BBᵀx)ᵀ/n³, n = |Bᵀx|
    (div_S of P⊥g: the normal part −(g·x)x contributes −(g·x) tr P⊥ = −2 g·x on S²), tr(P⊥M) = tr M − xᵀMx."""
    bx = X @ B
    n = np.linalg.norm(bx, axis=1)
    Ax = X @ A.T
    BBx = bx @ B.T
    g = Ax / n[:, None]
    gx = np.einsum("ij,ij->i", g, X)
    v = g - gx[:, None] * X
    xAx = np.einsum("ij,ij->i", X, Ax)
    tr_dg = np.trace(A) / n - np.einsum("ij,ij->i", Ax, BBx) / n**3
    x_dg_x = xAx / n - xAx * np.einsum("ij,ij->i", X, BBx) / n**3
    return v, tr_dg - x_dg_x - 2.0 * gx


def rk4_step(mesh: sphere_mesh.SphereMesh, dt: float, A: np.ndarray, B: np.ndarray) -> None:
    """One classical RK4 step of (x, ℓ) for every vertex: dx/dt = v, dℓ/dt = −div_S v; stages renormalised onto
    the sphere (the ambient extension keeps |x| = 1 invariant, so this costs no order)."""
    X, ell = mesh.points, mesh.log_density
    dx, dl = np.zeros_like(X), np.zeros_like(ell)
    kx, kl = None, None
    for frac, weight in ((0.0, 1.0), (0.5, 2.0), (0.5, 2.0), (1.0, 1.0)):
        if kx is None:
            Xs = X
        else:
            Xs = X + frac * dt * kx
            Xs = Xs / np.linalg.norm(Xs, axis=1, keepdims=True)
        kx, div = velocity_and_divergence(Xs, A, B)
        kl = -div
        dx += weight * kx
        dl += weight * kl
    Xn = X + dt / 6.0 * dx
    mesh.points = Xn / np.linalg.norm(Xn, axis=1, keepdims=True)
    mesh.log_density = ell + dt / 6.0 * dl


def cap_size_field(centres: np.ndarray, fine: float, coarse: float, radius: float):
    """Target edge ``fine`` within ``radius`` of ±centre (any of the rows), ``coarse`` elsewhere."""
    cos_r = math.cos(radius)

    def size(x: np.ndarray) -> np.ndarray:
        near = np.any(np.abs(x @ np.atleast_2d(centres).T) > cos_r, axis=-1)
        return np.where(near, fine, coarse)

    return size


def w2_two_atoms(mesh: sphere_mesh.SphereMesh, u: np.ndarray, normalised: bool = True, n: int = 2) -> float:
    """W2 of the mesh's measure to the two atoms ±u carrying half the mass each: √Σ w (2 − 2|⟨y, u⟩|) over the
    7-point rule's nodes y on n × n sub-triangles; weights c_T·exp(ℓ linear) scaled so every triangle holds its
    mass (``normalised``), or exp(ℓ linear) alone (the density of the characteristics without the masses)."""
    bary = sphere_mesh.SUB_BARY[n, : sphere_mesh.SUB_COUNT[n]]
    total = 0.0
    for start in range(0, mesh.triangles.shape[0], 20000):
        F = mesh.triangles[start : start + 20000]
        Y, w = sphere_mesh.triangle_nodes(mesh.points, F, n)
        log_w = np.log(w) + mesh.log_density[F] @ bary.T  # (triangle, node)
        if normalised:
            top = log_w.max(axis=1, keepdims=True)
            log_w += (mesh.log_mass[start : start + 20000] - (top[:, 0] + np.log(np.exp(log_w - top).sum(1))))[:, None]
        total += float(np.sum(np.exp(log_w) * (2.0 - 2.0 * np.abs(Y @ u))))
    return math.sqrt(max(total, 0.0))


def exact_w2(
    A: np.ndarray, B: np.ndarray, times: np.ndarray, panels: int = 40, order: int = 8, n_phi: int = 48
) -> np.ndarray:
    """W2(ρ_t, Π♯ρ0) for uniform ρ0 (module docstring): the hemisphere ⟨x0, u⟩ > 0 (twice, by symmetry) with
    z = ⟨x0, u⟩ = e^{−ζ}, dz = z dζ, ζ ∈ [0, panels] by Gauss–Legendre panels of width 1, azimuth by the
    trapezoid rule; every x0 moved by the exact time-changed linear flow."""
    _, U = np.linalg.eigh(A)
    U = U[:, ::-1]
    g, gw = np.polynomial.legendre.leggauss(order)
    zeta = (np.arange(panels)[:, None] + 0.5 + 0.5 * g[None, :]).ravel()
    z = np.exp(-zeta)
    phi = 2.0 * np.pi * np.arange(n_phi) / n_phi
    Z, PHI = np.meshgrid(z, phi, indexing="ij")
    R = np.sqrt(1.0 - Z**2)
    X0 = (np.stack([Z, R * np.cos(PHI), R * np.sin(PHI)], axis=-1) @ U.T).reshape(-1, 3)
    # dz dφ/(4π) on one hemisphere, twice: (z dζ)(2π/n_phi)/(4π)·2
    weight = np.repeat(np.tile(0.5 * gw, panels) * z / n_phi, n_phi)
    times = np.asarray(times, dtype=float)
    s = exact.exact_time_change(X0, A, B, np.maximum(times, 1e-12), rtol=1e-11, atol=1e-12)
    out = np.empty(times.size)
    for k in range(times.size):
        X = exact.normalised_linear_flow(X0, A, s[k])
        out[k] = math.sqrt(max(float(weight @ (2.0 - 2.0 * np.abs(X @ U[:, 0]))), 0.0))
    return out


def exact_log_density(A: np.ndarray, B: np.ndarray, y: np.ndarray, times: np.ndarray) -> np.ndarray:
    """log ρ_t(y) for uniform ρ0: log(1/4π) − ∫_0^t div_S v along the characteristic that reaches y at t, traced
    backwards from y (the field is autonomous)."""

    def backwards(_t, state):
        x = state[:3] / np.linalg.norm(state[:3])
        v, div = velocity_and_divergence(x[None, :], A, B)
        return np.concatenate([-v[0], div])

    times = np.asarray(times, dtype=float)
    sol = solve_ivp(backwards, (0.0, float(times.max())), np.concatenate([y, [0.0]]), method="DOP853",
                    t_eval=times, rtol=1e-12, atol=1e-13)  # fmt: skip
    return -math.log(4.0 * math.pi) - sol.y[3]


def dry_run(
    level: int = 4,
    fine: float = 0.03,
    coarse: float = 0.08,
    radius: float = 0.35,
    horizon: float = 30.0,
    dt: float = 0.05,
    every: float = 0.25,
    mode: str = "ale",
    record: tuple[float, ...] = (1, 5, 10, 15, 20, 25, 30),
    problem=None,
    report=None,
    collapse_ratio: float = sphere_remesh.COLLAPSE_RATIO,
) -> list[dict]:
    """Integrate the uniform law on the icosphere of ``level`` to ``horizon``, remeshing every ``every`` with
    ``mode`` "ale" (split, flip, collapse), "split" (split only) or "none"; a row per ``record`` time: triangles,
    worst and median aspect ratio, inverted triangles, W2 to the two atoms (normalised and ℓ-only), log ρ(y*),
    CPU seconds remeshing."""
    A, B, _, U, ystar = problem if problem is not None else concentration_problem()
    u = U[:, 0]
    size = cap_size_field(ystar, fine, coarse, radius)
    mesh = sphere_mesh.mesh_from_density(level, lambda x: np.full(x.shape[:-1], -math.log(4.0 * math.pi)))

    def remesh(m):
        if mode == "none":
            return m
        ale = mode == "ale"
        return sphere_remesh.adapt(m, size, flip=ale, collapse=ale, collapse_ratio=collapse_ratio)[0]

    mesh = remesh(mesh)
    steps, per_remesh = int(round(horizon / dt)), int(round(every / dt))
    wanted = {int(round(t / dt)): t for t in record if t <= horizon + 1e-9}
    rows, cpu_remesh = [], 0.0
    for k in range(steps + 1):
        if k and k % per_remesh == 0:
            start = time.process_time()
            mesh = remesh(mesh)
            cpu_remesh += time.process_time() - start
        if k in wanted:
            aspect = sphere_remesh.aspect_ratios(mesh.points, mesh.triangles)
            row = {
                "t": wanted[k],
                "triangles": int(mesh.triangles.shape[0]),
                "worst_aspect": float(aspect.max()),
                "median_aspect": float(np.median(aspect)),
                # triangles turned over by the flow: what a Lagrangian mesh of slivers ends in
                "inverted": int(np.sum(sphere_mesh.orientation(mesh.points, mesh.triangles) <= 0)),
                "w2": w2_two_atoms(mesh, u),
                "w2_without_masses": w2_two_atoms(mesh, u, normalised=False),
                "log_rho_ystar": float(sphere_remap.log_density_at(mesh, ystar)),
                "cpu_remesh": cpu_remesh,
            }
            rows.append(row)
            if report is not None:
                report(row)
        if k < steps:
            rk4_step(mesh, dt, A, B)
    return rows


def with_exact(rows: list[dict], problem) -> list[dict]:
    """The rows with the exact W2 and log ρ(y*) and the errors."""
    A, B, _, _, ystar = problem
    times = np.array([r["t"] for r in rows], dtype=float)
    w2, lr = exact_w2(A, B, times), exact_log_density(A, B, ystar, times)
    for r, w, lx in zip(rows, w2, lr):
        r.update(w2_exact=w, w2_error=r["w2"] / w - 1.0, w2_error_without_masses=r["w2_without_masses"] / w - 1.0)
        r.update(log_rho_exact=lx, log_rho_error=r["log_rho_ystar"] - lx)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| t | triangles | worst aspect | W2 exact | W2 rel. error | same, no mass normalisation "
        "| log ρ(y*) exact | mesh − exact | CPU s remeshing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['t']:g} | {r['triangles']} | {r['worst_aspect']:.2f} | {r['w2_exact']:.4g} | {r['w2_error']:+.2e} "
            f"| {r['w2_error_without_masses']:+.2e} | {r['log_rho_exact']:.3f} | {r['log_rho_error']:+.3f} "
            f"| {r['cpu_remesh']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--level", type=int, default=4)
    parser.add_argument("--fine", type=float, default=0.03)
    parser.add_argument("--coarse", type=float, default=0.08)
    parser.add_argument("--radius", type=float, default=0.35)
    parser.add_argument("--horizon", type=float, default=30.0)
    parser.add_argument("--dt", type=float, default=0.05)
    parser.add_argument("--every", type=float, default=0.25)
    parser.add_argument("--mode", choices=("ale", "split", "none"), default="ale")
    parser.add_argument("--collapse-ratio", type=float, default=sphere_remesh.COLLAPSE_RATIO)
    parser.add_argument("--markdown", default=None, help="also write the table as a stamped Markdown page")
    args = parser.parse_args()
    wall = time.perf_counter()
    problem = concentration_problem()
    record = tuple(t for t in (1, 5, 10, 15, 20, 25, 30) if t <= args.horizon)
    rows = dry_run(args.level, args.fine, args.coarse, args.radius, args.horizon, args.dt, args.every, args.mode,
                   record, problem, lambda r: print(r, flush=True), args.collapse_ratio)  # fmt: skip
    table = markdown(with_exact(rows, problem))
    print(table)
    if args.markdown:
        command = harness.command(__file__, sys.argv[1:])
        page = [
            "# Zero-temperature dry run of the ALE sphere mesh (generated)",
            "",
            harness.stamp(command, "sphere-zero-temperature", seconds=time.perf_counter() - wall),
            "",
            f"The uniform law moved by the zero-temperature field of the `concentration` matrices, level {args.level}, "
            f"target edge {args.fine:g} within {args.radius:g} rad of ±y* and {args.coarse:g} elsewhere, remeshing "
            f"({args.mode}) every {args.every:g}, RK4 at {args.dt:g}; against the exact solution (module docstring of "
            "the script; method: docs/sphere_mean_field.md).",
            "",
            table,
        ]
        Path(args.markdown).write_text("\n".join(page) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
