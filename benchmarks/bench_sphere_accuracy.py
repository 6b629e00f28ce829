"""Cost of the S² mean-field solver against the particle system at equal W2 accuracy, run by `make bench`.

On the `concentration` experiment (config/config.yaml: d = 3, its matrices and initial tokens), per β up to a
short horizon:

* a reference: the mesh solver (``sphere_meanfield``, the pipeline's reference settings) on the finest level asked,
  carrying the first ``max(--tokens)`` initial tokens of replica 0 as tracers;
* the mesh on each coarser level asked, carrying the same tokens: its wall time (with those tracers, so the mesh
  pays for as many points as the largest particle run), field evaluations, triangles, and its error: the largest
  over the snapshots of the exact W2 between its push-forward of the tokens and the reference's (``largest_w2``),
  and of the same-token root mean square (``largest_rms``, the coupling that W2 can only improve on);
* the particle system (the dense kernel, RK4 at the experiment's dt) from N tokens, for each N of ``--tokens``, in
  up to ``--blocks`` disjoint blocks of the tokens (independent replicas: the tokens are independent draws of ρ0):
  its wall time and both errors against the reference's push-forward of the same block (``particle_errors``);
* at equal accuracy: the N at which the particles' W2 would equal each mesh level's, from the power law
  error ≈ k·N^s fitted to the measured N (``equal_accuracy_tokens``) and from N^(-1/2) through the largest N
  (``at_equal_error``), and what the particle run would cost there, its cost per N² (the increase between the two
  largest N run) times N*² (every dense step prices all N² pairs; the particles' error is set by their number, not
  by their step: RK4 at dt is far below it).

The particles' error is the fluctuation of an N-token field around the mean field, of order N^(-1/2) in W2, so
matching a mesh error of 1e-3 takes N in the millions, beyond what is run here: N* and its cost are extrapolations
from the measured N (the fitted exponent is printed beside them). W2 favours the particles: an optimal coupling
matches a token with a neighbour's image where its own has drifted, so their same-token error falls far more
slowly with N. The mesh's error is measured against a reference one level finer, which holds its own error: the
page brackets the finest measured level's N* by the reference's error estimated from the ratio of successive
levels (``reference_bracket``). Read the ratios, not the absolute times: the machine may be shared.
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


def largest_rms(X: np.ndarray, Y: np.ndarray) -> float:
    """The largest over the snapshots of the same-token root mean square distance between X and Y (time, token,
    3): token i of X against token i of Y, the coupling W2 minimises over."""
    return float(np.sqrt(np.mean(np.sum((X - Y) ** 2, axis=-1), axis=-1)).max())


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
    if args.blocks < 1:
        raise SystemExit("bench_sphere_accuracy: --blocks must be at least 1")
    if not (0 < args.horizon < math.inf and all(0 < b < math.inf for b in args.betas)):
        raise SystemExit("bench_sphere_accuracy: --horizon and every --betas must be positive and finite")
    return args


def check_levels(args, B: np.ndarray) -> None:
    """SystemExit naming the first (level, β) whose mesh cannot resolve the kernel (``sphere_levels.level_resolves``),
    before the reference's solve: every level asked, the reference's included, must take every β."""
    for beta in args.betas:
        for level in [*args.levels, args.reference_level]:
            if not sphere_levels.level_resolves(level, B, beta):
                raise SystemExit(
                    f"bench_sphere_accuracy: level {level} is too coarse for beta = {beta:g} (the softmax would need "
                    "more sub-triangles than it allows): raise --levels"
                )


def main(argv=None) -> int:
    args = checked(parser().parse_args(argv))
    cfg = schema.load_config_file(args.config)
    validation.validate_config(cfg, harness.SCHEMA, configfiles=[args.config])
    exp = cfg["experiments"][args.experiment]
    if exp["dim"] != 3 or exp["initial_measure"]["name"] != "uniform":
        raise SystemExit(f"bench_sphere_accuracy: experiment {args.experiment} must be d = 3 from the uniform measure")
    M = experiment.build_matrices(args.experiment, exp, cfg["root_seed"])
    check_levels(args, M.B)
    grid = experiment.time_grid(exp, args.horizon)
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
        log(f"beta {beta:g}: particles (N, blocks, s, W2, RMS): {measured}")
        tokens, _, seconds, errors, _ = (np.array(c) for c in zip(*measured))
        for level in args.levels:
            tracers, mesh_s, fev, tri = mesh_solve(M, beta, grid.times, X0, level)
            error, rms = largest_w2(tracers, ref), largest_rms(tracers, ref)
            equal = at_equal_error(tokens, seconds, errors, error)
            mesh_rows.append((beta, level, tri, fev, mesh_s, error, rms, equal))
            log(f"beta {beta:g}: level {level}: {mesh_rows[-1]}")
        mesh_rows.append((beta, args.reference_level, ref_tri, ref_fev, ref_s, float("nan"), float("nan"), {}))
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
    """(N, blocks, seconds, W2 error, same-token RMS error) of the particle system from N tokens: ``blocks``
    disjoint blocks of N of the initial tokens (at most as many as fit; the tokens are independent draws of ρ0, so
    each block is an independent replica), the seconds and the errors (``largest_w2``, ``largest_rms``) against the
    reference's push-forward of the same block averaged over them."""
    count = max(1, min(blocks, X0.shape[0] // n))
    runs = []
    for b in range(count):
        block = slice(b * n, (b + 1) * n)
        X, seconds = particle_solve(M, beta, grid, X0[block])
        runs.append((seconds, largest_w2(X, ref[:, block]), largest_rms(X, ref[:, block])))
    seconds, error, rms = np.mean(runs, axis=0)
    return n, count, float(seconds), float(error), float(rms)


def at_equal_error(tokens, seconds, errors, target: float) -> dict:
    """What the particles would need to reach the W2 error ``target``, in two readings: ``fitted``, the power law
    fitted to every N (``equal_accuracy_tokens``), and ``half``, the rate N^(-1/2) of a sum of N independent terms
    through the largest N measured; each (s, N*, seconds at N*: ``pair_seconds`` times N*²), both NaN where the
    errors do not fall with N (no rate through them reaches a smaller error)."""
    per_pair = pair_seconds(tokens, seconds)
    try:
        s, n_fit = equal_accuracy_tokens(tokens, errors, target)
        n_half = tokens[-1] * (errors[-1] / target) ** 2
    except ValueError:
        s = n_fit = n_half = float("nan")
    return {"fitted": (s, n_fit, per_pair * n_fit**2), "half": (-0.5, n_half, per_pair * n_half**2)}


def reference_bracket(mesh_rows, beta: float) -> str:
    """A sentence bracketing the finest measured level's N* (fitted) at β by the reference's own error: with r the
    ratio of the two finest measured levels' errors (the error's fall per level), the reference's error is about
    e/r, so the level's own error lies in [e(1 − 1/r), e(1 + 1/r)]; '' with fewer than two measured levels or no
    N*."""
    rows = [r for r in mesh_rows if r[0] == beta and r[7]]
    if len(rows) < 2 or not math.isfinite(rows[-1][7]["fitted"][1]):
        return ""
    (_, coarse, *_, e_coarse, _, _), (_, fine, *_, e_fine, _, equal) = rows[-2], rows[-1]
    r = e_coarse / e_fine
    if not r > 1:
        return f"β = {beta:g}: the error does not fall from level {coarse} to {fine}, no bracket. "
    s, n_star, cost = equal["fitted"]
    lo, hi = e_fine * (1 + 1 / r), e_fine * (1 - 1 / r)  # a larger error needs fewer tokens
    n_lo, n_hi = n_star * (lo / e_fine) ** (1 / s), n_star * (hi / e_fine) ** (1 / s)
    return (
        f"β = {beta:g}: the error falls {r:.3g}-fold from level {coarse} to {fine}; were the reference's own error "
        f"{e_fine / r:.3g} (the same fall), level {fine}'s would lie in [{hi:.3g}, {lo:.3g}], its N* (fitted) in "
        f"[{n_lo:.3g}, {n_hi:.3g}] and the particles' seconds there in [{cost * (n_lo / n_star) ** 2:.3g}, "
        f"{cost * (n_hi / n_star) ** 2:.3g}]. "
    )


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
        f"Reference: the mesh on level {args.reference_level}. Every mesh level carries the first "
        f"{args.tokens[-1]} tokens as tracers (its seconds include them). Error of a method: the largest over the "
        "snapshots of the exact W2 between its push-forward of the tokens and the reference's push-forward of the "
        "same tokens; beside it the same-token root mean square (token i against token i, the coupling W2 can "
        f"only improve on). Particles: the dense kernel, RK4 at dt = {grid.dt:g}; at each N up to {args.blocks} "
        "disjoint blocks of the tokens (independent replicas), seconds and errors averaged over them. At equal "
        "error: the N* whose W2 error would equal the level's, from the power law k·N^s fitted to the particle "
        "runs below, and from the rate N^(-1/2) through the largest N run; the particle run's seconds there are its "
        "cost per N² (the increase between the two largest N run) times N*². Both are extrapolations beyond the N "
        "run, in W2, the metric that favours the particles (their same-token error falls far more slowly).",
        "",
        "| β | level | triangles at t = T | field evaluations | mesh s | mesh s per unit t | error (W2) | error (same "
        "token) | fitted s | N* (fitted) | particle s at N* (fitted) | N* (N^(-1/2)) | particle s at N* (N^(-1/2)) | "
        "particles ÷ mesh |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for beta, level, tri, fev, mesh_s, error, rms, equal in mesh_rows:
        label = f"{level}" if equal else f"{level} (reference)"
        head = f"| {beta:g} | {label} | {tri} | {fev} | {mesh_s:.3g} | {mesh_s / T:.3g} | "
        if not equal:
            lines.append(head + " | ".join(["—"] * 8) + " |")
            continue
        (s, n_fit, cost_fit), (_, n_half, cost_half) = equal["fitted"], equal["half"]
        lines.append(head + f"{error:.3g} | {rms:.3g} | {s:.3g} | {n_fit:.3g} | {cost_fit:.3g} | {n_half:.3g} | "
                     f"{cost_half:.3g} | {ratio_range(mesh_s, cost_fit, cost_half)} |")  # fmt: skip
    bracket = "".join(reference_bracket(mesh_rows, beta) for beta in args.betas)
    lines += ["", bracket.strip()] if bracket else []
    lines += [
        "",
        "Particle runs:",
        "",
        "| β | N | blocks | s | s per unit t | error (W2) | error (same token) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {b:g} | {n} | {k} | {sec:.3g} | {sec / T:.3g} | {err:.3g} | {rms:.3g} |"
        for b, n, k, sec, err, rms in particle_rows
    ]
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
