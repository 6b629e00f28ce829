"""Cost of the S² mean-field solver against the particle system at equal W2 accuracy, run by `make bench`.

On the `concentration` experiment (config/config.yaml: d = 3, its matrices and initial tokens), per β up to a
short horizon:

* a reference: the mesh solver (``sphere_meanfield``, the pipeline's reference settings) on the finest level asked,
  carrying the first ``max(--tokens)`` initial tokens of replica 0 as tracers;
* the mesh on each coarser level asked, carrying the first ``--mesh-tracers`` of them: its wall time, field
  evaluations, triangles, and its error: the largest over the snapshots of the exact W2 between its tracers and the
  reference's (the same tokens pushed forward by both: the coupling the pipeline's particle error uses);
* the particle system (the dense kernel, RK4 at the experiment's dt) from the first N tokens, for each N of
  ``--tokens``: its wall time and its error, the largest over the snapshots of W2 to the reference's push-forward
  of the same N tokens;
* at equal accuracy: the N at which the particles' error would equal each mesh level's, from the power law
  error ≈ k·N^s fitted to the measured N (``equal_accuracy_tokens``), and what the particle run would cost there,
  its cost per N² (the increase between the two largest N run) times N*² (every dense step prices all N² pairs;
  the particles' error is set by their number, not by their step: RK4 at dt is far below it).

The particles' error is the fluctuation of an N-token field around the mean field, of order N^(-1/2), so matching
a mesh error of 1e-3 takes N in the millions, beyond what is run here: N* and its cost are extrapolations from the
measured N (the fitted exponent is printed beside them), the mesh's numbers are measured. Read the ratios, not the
absolute times: the machine may be shared.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from lowtemp.analysis import fitting
from lowtemp.config import experiment, schema, validation
from lowtemp.dynamics import integrate, kernels, sphere_levels, sphere_meanfield
from lowtemp.model import measures
from lowtemp.model.seeding import generator
from lowtemp.store import harness
from lowtemp.transport import w2


def equal_accuracy_tokens(tokens, errors, target: float) -> tuple[float, float]:
    """(s, N*): the exponent of the least-squares power law error ≈ k·N^s over the measured ``tokens`` and
    ``errors``, and the N at which that law reaches the error ``target``. ValueError where the errors do not
    fall with N (s ≥ 0: no N reaches a smaller error) or fewer than two N were measured."""
    tokens, errors = np.asarray(tokens, float), np.asarray(errors, float)
    if tokens.size < 2 or not (np.all(tokens > 0) and np.all(errors > 0) and np.all(np.isfinite(errors))):
        raise ValueError(f"equal accuracy needs two or more N with positive errors, got N {tokens}, errors {errors}")
    if not (target > 0 and math.isfinite(target)):
        raise ValueError(f"equal accuracy needs a positive target error, got {target!r}")
    s, log_k = fitting.line_fit(np.log(tokens), np.log(errors))
    if not s < 0:
        raise ValueError(f"the particles' error does not fall with N (exponent {s:.3g}): no N reaches {target:.3g}")
    return float(s), float(math.exp((math.log(target) - log_k) / s))


def pair_seconds(tokens, seconds) -> float:
    """Seconds per N² of a particle run: the increase between the two largest N over the increase of N², so that
    what every run pays whatever N (the steps' bookkeeping) does not count; NaN where timing noise makes it not
    positive."""
    per_pair = (seconds[-1] - seconds[-2]) / (float(tokens[-1]) ** 2 - float(tokens[-2]) ** 2)
    return per_pair if per_pair > 0 else float("nan")


def largest_w2(X: np.ndarray, Y: np.ndarray) -> float:
    """The largest over the snapshots of the exact W2 between X and Y, both (time, token, 3)."""
    return max(w2.w2(X[k], Y[k]) for k in range(X.shape[0]))


def mesh_solve(M, beta: float, times, tracers, level: int):
    """(tracers (time, token, 3), seconds, field evaluations, triangles at the last snapshot) of the mesh solver
    on ``level`` with the pipeline's reference settings."""
    settings = sphere_meanfield.reference_settings(level, None, sphere_levels.reference_variation(level, M.B, beta))
    mesh = sphere_meanfield.initial_mesh("uniform", {}, level)
    start = time.perf_counter()
    sol = sphere_meanfield.solve(M.B, M.V, beta, times, mesh, tracers, settings)
    seconds = time.perf_counter() - start
    return sol.tracers, seconds, int(sol.info["nfev"]), int(sol.meshes[-1].triangles.shape[0])


def particle_solve(M, beta: float, grid: integrate.TimeGrid, X0: np.ndarray):
    """(positions (time, token, 3), seconds) of the dense particle system from X0 (token, 3), RK4 at the grid's
    dt."""
    start = time.perf_counter()
    X = integrate.simulate(lambda Y: kernels.dense_field(Y, M.B, M.V, beta), X0[None], grid, "rk4")
    return X[0], time.perf_counter() - start


def warm_up(M, args, grid: integrate.TimeGrid, X0: np.ndarray) -> None:
    """One short solve of each kind, so that no timing below includes numba's compilation."""
    short = integrate.TimeGrid(grid.horizon / grid.snapshots, 1, grid.dt)
    mesh_solve(M, args.betas[0], short.times, X0[:2], min(args.levels))
    particle_solve(M, args.betas[0], short, X0[: args.tokens[0]])


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--experiment", default="concentration")
    ap.add_argument("--betas", type=float, nargs="+", default=[10.0, 100.0])
    ap.add_argument("--horizon", type=float, default=2.0, help="rounded to the experiment's snapshot interval")
    ap.add_argument("--levels", type=int, nargs="+", default=[2, 3], help="the mesh levels measured")
    ap.add_argument("--reference-level", type=int, default=4)
    ap.add_argument("--tokens", type=int, nargs="+", default=[128, 256, 512, 1024, 2048], help="particle N")
    ap.add_argument("--mesh-tracers", type=int, default=256)
    ap.add_argument("--blocks", type=int, default=4, help="disjoint token blocks (replicas) per particle N, at most")
    ap.add_argument("--markdown", default=None)
    return ap


def checked(args) -> argparse.Namespace:
    """The arguments, or SystemExit naming the first one out of range (before any solve)."""
    args.tokens = sorted(set(args.tokens))
    if len(args.tokens) < 2 or args.tokens[0] < 2:
        raise SystemExit("bench_sphere_accuracy: --tokens needs two or more N, each at least 2")
    if not args.levels or max(args.levels) >= args.reference_level or min(args.levels) < 1:
        raise SystemExit("bench_sphere_accuracy: every --levels must lie in [1, --reference-level) (level 0's edges "
                         "are longer than the remeshing allows)")  # fmt: skip
    if not 2 <= args.mesh_tracers <= args.tokens[-1]:
        raise SystemExit("bench_sphere_accuracy: --mesh-tracers must lie in [2, max(--tokens)]")
    if args.blocks < 1:
        raise SystemExit("bench_sphere_accuracy: --blocks must be at least 1")
    if not (args.horizon > 0 and all(b > 0 for b in args.betas)):
        raise SystemExit("bench_sphere_accuracy: --horizon and every --betas must be positive")
    return args


def main(argv=None) -> int:
    args = checked(parser().parse_args(argv))
    cfg = schema.load_config_file(args.config)
    validation.validate_config(cfg, harness.SCHEMA, configfiles=[args.config])
    exp = cfg["experiments"][args.experiment]
    if exp["dim"] != 3 or exp["initial_measure"]["name"] != "uniform":
        raise SystemExit(f"bench_sphere_accuracy: experiment {args.experiment} must be d = 3 from the uniform measure")
    M = experiment.build_matrices(args.experiment, exp, cfg["root_seed"])
    full = experiment.time_grid(exp)
    interval = full.horizon / full.snapshots
    snapshots = max(1, int(round(args.horizon / interval)))
    grid = integrate.TimeGrid(snapshots * interval, snapshots, full.dt)
    rng = generator(cfg["root_seed"], args.experiment, "initial_tokens")
    X0 = measures.sample_initial_tokens("uniform", rng, 1, args.tokens[-1], 3)[0]
    wall = time.perf_counter()
    warm_up(M, args, grid, X0)
    mesh_rows, particle_rows = [], []
    for beta in args.betas:
        ref, ref_s, ref_fev, ref_tri = mesh_solve(M, beta, grid.times, X0, args.reference_level)
        log(f"beta {beta:g}: reference level {args.reference_level}, {ref_s:.1f} s")
        measured = [particle_errors(M, beta, grid, X0, ref, n, args.blocks) for n in args.tokens]
        particle_rows += [(beta, *row) for row in measured]
        log(f"beta {beta:g}: particles (N, blocks, s, error): {measured}")
        tokens, _, seconds, errors = (np.array(c) for c in zip(*measured))
        for level in args.levels:
            tracers, mesh_s, fev, tri = mesh_solve(M, beta, grid.times, X0[: args.mesh_tracers], level)
            error = largest_w2(tracers, ref[:, : args.mesh_tracers])
            mesh_rows.append((beta, level, tri, fev, mesh_s, error, *at_equal_error(tokens, seconds, errors, error)))
            log(f"beta {beta:g}: level {level}: {mesh_rows[-1]}")
        mesh_rows.append((beta, args.reference_level, ref_tri, ref_fev, ref_s, float("nan"), {}))
    lines = page(args, grid, mesh_rows, particle_rows, time.perf_counter() - wall, argv)
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


def log(msg: str) -> None:
    """A progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def particle_errors(M, beta: float, grid, X0: np.ndarray, ref: np.ndarray, n: int, blocks: int):
    """(N, blocks, seconds, error) of the particle system from N tokens: ``blocks`` disjoint blocks of N of the
    initial tokens (at most as many as fit; the tokens are independent draws of ρ0, so each block is an
    independent replica), the seconds and the error (``largest_w2`` against the reference's push-forward of the
    same block) averaged over them."""
    count = max(1, min(blocks, X0.shape[0] // n))
    runs = []
    for b in range(count):
        block = slice(b * n, (b + 1) * n)
        X, seconds = particle_solve(M, beta, grid, X0[block])
        runs.append((seconds, largest_w2(X, ref[:, block])))
    seconds, error = np.mean(runs, axis=0)
    return n, count, float(seconds), float(error)


def at_equal_error(tokens, seconds, errors, target: float) -> tuple[dict]:
    """What the particles would need to reach the error ``target``, in two readings: ``fitted``, the power law
    fitted to every N (``equal_accuracy_tokens``), and ``half``, the rate N^(-1/2) of a sum of N independent terms
    through the largest N measured; each (s, N*, seconds at N*: ``pair_seconds`` times N*²), NaN where the
    errors do not fall with N."""
    per_pair = pair_seconds(tokens, seconds)
    try:
        s, n_fit = equal_accuracy_tokens(tokens, errors, target)
    except ValueError:
        s, n_fit = float("nan"), float("nan")
    n_half = tokens[-1] * (errors[-1] / target) ** 2
    return ({"fitted": (s, n_fit, per_pair * n_fit**2), "half": (-0.5, n_half, per_pair * n_half**2)},)


def page(args, grid, mesh_rows, particle_rows, seconds: float, argv) -> list[str]:
    """The benchmark's markdown: the mesh at each level against the particles at equal accuracy, then the
    particle runs measured."""
    T = grid.horizon
    lines = [
        "# The S² mean-field solver against particles at equal W2 accuracy (generated by `make bench`)",
        "",
        harness.stamp(harness.command(__file__, sys.argv[1:] if argv is None else argv), "bench", seconds=seconds),
        "",
        f"{args.experiment}'s matrices and initial tokens, to t = {T:g} (snapshots every {T / grid.snapshots:g}). "
        f"Reference: the mesh on level {args.reference_level} carrying the first {args.tokens[-1]} tokens. Error "
        "of a method: the largest over the snapshots of the exact W2 between its push-forward of the tokens and the "
        f"reference's push-forward of the same tokens (the mesh levels carry the first {args.mesh_tracers}; their "
        "error against the reference holds the reference's own, smaller, error). Particles: the dense kernel, RK4 at "
        f"dt = {grid.dt:g}; at each N up to {args.blocks} disjoint blocks of the tokens (independent replicas), "
        "seconds and error averaged over them. At equal error: the N* whose error would equal the level's, from "
        "the power law k·N^s fitted to the particle runs below, and from the rate N^(-1/2) through the largest N "
        "run; the particle run's seconds there are its cost per N² (the increase between the two largest N run) "
        "times N*². Both are extrapolations beyond the N run; the mesh's columns are measured.",
        "",
        "| β | level | triangles at t = T | field evaluations | mesh s | mesh s per unit t | error (W2) | fitted s | "
        "N* (fitted) | particle s at N* (fitted) | N* (N^(-1/2)) | particle s at N* (N^(-1/2)) | "
        "particles ÷ mesh |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for beta, level, tri, fev, mesh_s, error, equal in mesh_rows:
        head = f"| {beta:g} | {level} | {tri} | {fev} | {mesh_s:.3g} | {mesh_s / T:.3g} | "
        if not equal:
            lines.append(head.replace(f"| {level} |", f"| {level} (reference) |") + " | ".join(["—"] * 7) + " |")
            continue
        (s, n_fit, cost_fit), (_, n_half, cost_half) = equal["fitted"], equal["half"]
        lines.append(head + f"{error:.3g} | {s:.3g} | {n_fit:.3g} | {cost_fit:.3g} | {n_half:.3g} | "
                     f"{cost_half:.3g} | {ratio_range(mesh_s, cost_fit, cost_half)} |")  # fmt: skip
    lines += [
        "",
        "Particle runs:",
        "",
        "| β | N | blocks | s | s per unit t | error (W2) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {b:g} | {n} | {k} | {sec:.3g} | {sec / T:.3g} | {err:.3g} |" for b, n, k, sec, err in particle_rows]
    return lines


def ratio_range(mesh_s: float, *costs: float) -> str:
    """The particles' seconds over the mesh's, from the smallest to the largest reading ('—' where none is
    finite: the errors did not fall with N, or timing noise left no cost per N²)."""
    ratios = sorted(c / mesh_s for c in costs if math.isfinite(c))
    if not ratios:
        return "—"
    return f"{ratios[0]:.3g}" if len(ratios) == 1 or ratios[0] == ratios[-1] else f"{ratios[0]:.3g} – {ratios[-1]:.3g}"


if __name__ == "__main__":
    sys.exit(main())
