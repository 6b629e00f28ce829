"""The mean field of a d = 3 experiment without symmetry against its particles: distance to E1(A), departure.

For each β: the general S² mean-field solver (``lowtemp.dynamics.sphere_meanfield``) on the experiment's own
matrices and initial measure, at two mesh levels (the finer one is the reference, the difference between the two
its error estimate), and the particle system from the experiment's own initial tokens at each ``--tokens`` N
(the package's dense kernel, RK4 at the experiment's dt). Reported per snapshot: the distance to E1(A)
(sqrt(∫ 2 − 2|P1 x| dρ), the `dist_leading_A` of distances.nc), and per run the departure by the pipeline's
geometric rule (``analysis.fitting.geometric_departure``: the first time after the metastable phase that the
distance exceeds half the distance between E1(A) and V's leading eigenspace). Per (β, N) the particles *stand for*
the mean field where every replica departs within one snapshot interval of the reference, compared on the snapshots
the reference resolves (the circle study's rule, ``mean_field_departure.particle_shift``); ``--figure`` draws where
they do in (log N, log β) beside the scaling at which softmax attention over N keys turns selective
(``lowtemp.plotting.regimes``).

Writes a Markdown page (``--markdown``) and the curves (``--out``, npz) stamped with the command, commit, CPU and
wall time, the npz after every β. Every number of the page is rebuilt from the npz (``beta_row``), so ``--render``
writes the page and picture of one or more npz files without running anything: the β of several runs on one page,
each run named in its stamp. Method and its checks: docs/sphere_mean_field.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import shlex
import sys
import time

import numpy as np
from mean_field_departure import boundary_summary, particle_shift, regime_table, stands_for
from sphere_departure_law import (
    departure_law_lines,
    level_departures,
    reference_departure,
    threshold_lines,
    threshold_sweep,
)

from lowtemp.analysis import fitting
from lowtemp.config import experiment, schema, validation
from lowtemp.dynamics import integrate, kernels, sphere_levels, sphere_meanfield
from lowtemp.dynamics.sphere_levels import REFERENCE_REMESH_EVERY, REFERENCE_RTOL
from lowtemp.model import measures, projection
from lowtemp.model.seeding import generator
from lowtemp.plotting import regimes
from lowtemp.store import checkpoint, harness, netcdf


def mesh_run(M, beta, times, name, params, level, max_triangles, log, checkpoints=None):
    """(distance to E1(A) per snapshot, distance to V's leading eigenspace (largest real part) per snapshot,
    the solve's counts: triangles at its last snapshot, field evaluations, seconds, and why it stopped before the
    horizon ('' where it did not)) of the mesh solver at ``level`` with the pipeline's reference settings
    (``sphere_meanfield.reference_settings``: remeshed to the level's edge, the softmax at the level's variation,
    ``sphere_levels.reference_variation``), as `make sphere` solves it, except that a solve the flow takes beyond
    what it resolves ends with the snapshots it reached (``keep_on_failure``), so a long run keeps its work. With a
    folder ``checkpoints`` the solve's state and the distances so far are written there at every stop
    (``store.checkpoint.MeshCheckpoint``), and a run started again goes on from them: the same numbers as a run
    never stopped."""
    mesh, settings = level_setup(M, beta, name, params, level, max_triangles)
    path = level_checkpoint(checkpoints, beta, level) if checkpoints else None
    ckpt = checkpoint.mesh_checkpoint(path, M.B, M.V, beta, times, mesh, np.zeros((0, 3)), settings)
    state, curves, info = ckpt.load() if ckpt else (None, {}, {})
    record = {"to_A": [], "to_V": [], "triangles": [], "nfev": 0, "seconds": 0.0, "done": False, "stopped": ""}
    record.update({k: v.tolist() for k, v in curves.items()}, **info)
    if state is not None and reopened(state, record, max_triangles):
        log(f"  beta {beta:g} level {level}: {state.mesh.triangles.shape[0]} triangles, within {max_triangles} now")
    if state is not None:
        log(f"  beta {beta:g} level {level}: " + (f"resumed at t = {state.t:g}" if not record["done"] else "done"))
    start, before = time.perf_counter(), record["seconds"]

    def progress(t, info):
        log(
            f"  beta {beta:g} level {level}: t = {t:g}, {info['triangles']} triangles, {info['nfev']} evaluations, "
            f"max |log c_T| {info['max_abs_log_c']:.2f}, {before + time.perf_counter() - start:.0f} s"
        )

    def keep(state):
        recorded = sphere_meanfield.SphereMeanFieldSolution(beta, np.array([t for t, _, _ in state.new]),
                                                            [m for _, m, _ in state.new], None)  # fmt: skip
        record["to_A"] += recorded.distance_to_eigenspace(M.E1).tolist()
        record["to_V"] += recorded.distance_to_eigenspace(M.E1_V_real).tolist()
        record["triangles"] += [int(m.triangles.shape[0]) for m in recorded.meshes]
        record.update(nfev=state.counts["nfev"], seconds=before + time.perf_counter() - start)
        record.update(done=state.final, stopped=state.stopped)
        if ckpt is not None:
            ckpt.save(state, {k: record[k] for k in ("to_A", "to_V", "triangles")},
                      {k: record[k] for k in ("nfev", "seconds", "done", "stopped")})  # fmt: skip

    if not record["done"]:
        sphere_meanfield.solve(
            M.B, M.V, beta, times, mesh, settings=settings, progress=progress, checkpoint=keep, resume=state
        )
    if record["stopped"]:
        log(f"  beta {beta:g} level {level} stopped: {record['stopped']}")
    pad = [np.nan] * (times.size - len(record["to_A"]))
    counts = {"triangles": record["triangles"][-1], "nfev": record["nfev"], "seconds": record["seconds"],
              "stopped": record["stopped"]}  # fmt: skip
    return np.array(record["to_A"] + pad), np.array(record["to_V"] + pad), counts


def level_setup(M, beta: float, name: str, params: dict, level: int, max_triangles: int | None):
    """(initial mesh, settings) of the mesh run at (β, level): the pipeline's reference settings at the level's
    softmax variation (``sphere_levels.reference_variation``), kept on failure."""
    variation = sphere_levels.reference_variation(level, M.B, beta)
    settings = sphere_meanfield.reference_settings(level, max_triangles, variation)
    return sphere_meanfield.initial_mesh(name, params, level), dataclasses.replace(settings, keep_on_failure=True)


def level_checkpoint(folder: str, beta: float, level: int) -> str:
    """The checkpoint file of the mesh run at (β, level) in ``folder``."""
    return os.path.join(folder, f"beta{beta:g}_level{level}.nc")


def reopened(state, record: dict, max_triangles: int | None) -> bool:
    """Whether a run that ended at the limit on triangles goes on under a larger one (``max_triangles`` None or at
    least its mesh's triangles): its final state then resumes, as the stop it ended at. A run that ended for another
    reason (its last time, the flow outrunning it) stays done."""
    if not (record["done"] and record["stopped"].startswith("more than max_triangles")):
        return False
    if max_triangles is not None and state.mesh.triangles.shape[0] > max_triangles:
        return False
    record["done"], record["stopped"] = False, ""
    return True


def both_levels(M, beta, times, name, params, levels, max_triangles, jobs: int, checkpoints=None) -> list[tuple]:
    """``mesh_run`` at the coarse and the fine level of ``levels``, one after the other, or side by side in two
    processes where ``jobs`` ≥ 2 (the same numbers: each solve is deterministic and alone in its process)."""
    calls = [(M, beta, times, name, params, level, max_triangles, log, checkpoints) for level in levels]
    if jobs < 2:
        return [mesh_run(*call) for call in calls]
    # spawned, not forked: a process that has run OpenMP code (the particles' BLAS) cannot be forked safely
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(mesh_run, *zip(*calls)))


def check_levels(M, betas, levels, name: str, params: dict) -> None:
    """MeshTooCoarse, before any solve, where a level's initial mesh is too coarse for its β (the solver's own
    check, ``sphere_meanfield.check_resolution``, at the run's settings)."""
    for beta, pair in zip(betas, levels):
        for level in pair:
            mesh, settings = level_setup(M, beta, name, params, level, None)
            sphere_meanfield.check_resolution(mesh, M.B, beta, settings.variation, settings.depth, settings.edge)


def particle_run(M, beta, X0, grid, log):
    """Distance to E1(A) per snapshot of the particle system from X0 (replica, token, 3), RK4 at the grid's dt."""
    start = time.perf_counter()
    X = integrate.simulate(lambda Y: kernels.dense_field(Y, M.B, M.V, beta), X0, grid, "rk4")
    log(f"  beta {beta:g} particles N = {X0.shape[-2]}: {time.perf_counter() - start:.0f} s")
    return projection.distance_to_eigenspace(X, M.E1)  # (replica, time)


def describe_departure(times, dist, gap) -> str:
    """Departure per curve of dist (…, time) by the pipeline's rule, on the snapshots the curve reached (a mesh run
    that stopped, at --max-triangles or where the flow outran it, has NaN after): '> T' where it was still
    metastable at its last snapshot T; 'stopped at T before it arrived' where it stopped before it came close to
    E1(A) (whether it has a metastable phase is unknown, not 'no metastable phase')."""
    out = []
    for curve in np.atleast_2d(dist):
        reached = int(np.sum(np.isfinite(curve)))
        departure, censored = fitting.geometric_departure(times[:reached], curve[:reached], gap)
        if bool(censored):
            out.append(f"> {times[reached - 1]:g}")
        elif np.isnan(departure) and reached < times.size:
            out.append(f"stopped at {times[reached - 1]:g} before it arrived")
        elif np.isnan(departure):
            out.append("no metastable phase")
        else:
            out.append(f"{float(departure):g}")
    return ", ".join(out)


def describe_end_phase(times, dist_A, dist_V, gap, tolerance) -> str:
    """Where the mean field ends, on the snapshots its solve reached: its distance to V's leading eigenspace at the
    last of them, and whether it lies within ``tolerance`` of it (Conjecture 1, the pipeline's
    ``claims.end_phase_tolerance``), is still approaching it (``fitting.still_approaching``: it fell by more than a
    tenth over the run's last tenth), moving away from it (``fitting.moving_away``: it rose by as much), or is off
    it and changed by less than a tenth over the run's last tenth (the change printed: whether it has settled there
    a longer horizon would say). 'not departed' where it is still metastable at its last snapshot; a departure
    within the run's last tenth is too late to read; prefixed 'no metastable phase' where it never arrived at E1(A)
    (a run that stopped before it arrived says so instead)."""
    reached = int(np.sum(np.isfinite(dist_A)))
    if reached == 0:
        return "not reached"
    t, dA, dV = times[:reached], dist_A[:reached], dist_V[:reached]
    departure, censored = fitting.geometric_departure(t, dA, gap)
    if bool(censored):
        return "not departed"
    if np.isnan(departure) and reached < times.size:
        return f"stopped at {t[-1]:g} before it arrived at E1(A)"
    final = float(dV[-1])
    prefix = "no metastable phase; " if np.isnan(departure) else ""
    last_tenth = t[0] + 0.9 * (t[-1] - t[0])
    if final <= tolerance:
        how = "on it"
    elif not np.isnan(departure) and float(departure) >= last_tenth:
        how = "departed in the run's last tenth: too late to read"
    elif bool(fitting.still_approaching(t, dV)):
        how = "still approaching"
    elif bool(fitting.moving_away(t, dV)):
        how = "moving away from it"
    else:
        how = f"off it, {float(fitting.last_tenth_change(t, dV)):+.1%} over the run's last tenth"
    return f"{prefix}{final:.4g} ({how})"


def log(msg) -> None:
    """A progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def sphere_experiment(config: str, name: str, script: str) -> tuple[dict, dict]:
    """(config, experiment ``name``) of a config file, the experiment in d = 3 (SystemExit naming ``script``
    otherwise: the S² solver needs it)."""
    cfg = schema.load_config_file(config)
    validation.validate_config(cfg, harness.SCHEMA, configfiles=[config])  # fills in the schema's defaults
    exp = cfg["experiments"][name]
    if exp["dim"] != 3:
        raise SystemExit(f"{script}: experiment {name} has d = {exp['dim']}, the solver needs 3")
    return cfg, exp


def parser() -> argparse.ArgumentParser:
    """The study's command line (also how ``render`` reads the settings of an npz that predates ``arguments``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--experiment", default="concentration")
    ap.add_argument("--betas", type=float, nargs="+", default=[10.0, 100.0])
    ap.add_argument(
        "--levels", type=int, nargs="+", default=[3, 4], help="coarse and fine mesh level: one pair, or one per beta"
    )
    ap.add_argument(
        "--horizons",
        type=float,
        nargs="+",
        default=None,
        help="one per beta, or one for all (default: the experiment's)",
    )
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--max-triangles", type=int, default=20000, help="a mesh run stops at the first snapshot above")
    ap.add_argument(
        "--render",
        nargs="+",
        metavar="NPZ",
        help="run nothing: write the page, figure and --out from the curves of these npz files (their β together)",
    )
    ap.add_argument("--jobs", type=int, default=1, help="2: solve the two levels side by side, in two processes")
    ap.add_argument(
        "--checkpoints",
        help="a folder: every mesh run's state written there at every stop, and a run started again goes on from it",
    )
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--figure", help="write the (log N, log β) picture of where particles stand for the mean field")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    args.tokens = sorted(set(args.tokens))  # the regime reads them increasing
    command = harness.command(__file__, argv if argv is not None else sys.argv[1:])
    if args.render:
        return render(args, command)
    wall = time.perf_counter()
    commit = harness.commit()  # the code that runs: read before the (long) run
    cfg, exp = sphere_experiment(args.config, args.experiment, "sphere_departure")
    M = experiment.build_matrices(args.experiment, exp, cfg["root_seed"])
    params = dict(exp["initial_measure"])
    name = params.pop("name")
    if len({f"{b:g}" for b in args.betas}) != len(args.betas):  # the npz names a β by its 6 significant digits
        raise SystemExit(f"sphere_departure: --betas must differ in their first 6 digits, got {args.betas}")
    horizons = args.horizons or [experiment.time_grid(exp).horizon]
    if len(horizons) not in (1, len(args.betas)):
        raise SystemExit("sphere_departure: --horizons takes one value, or one per beta")
    horizons = horizons * len(args.betas) if len(horizons) == 1 else horizons
    levels = levels_per_beta(args.levels, len(args.betas))
    try:  # every β's grid and levels checked before the first solve
        grids = [experiment.time_grid(exp, horizon) for horizon in horizons]
        check_levels(M, args.betas, levels, name, params)
    except ValueError as err:
        raise SystemExit(f"sphere_departure: {err}") from None
    rng = generator(cfg["root_seed"], args.experiment, "initial_tokens")
    X0 = measures.sample_initial_tokens(name, rng, args.replicas, max(args.tokens), 3, **params)
    geometry = end_phase_geometry(M, exp)
    curves, rows = {"arguments": np.array(json.dumps(shared_settings(args, cfg)))}, []
    for beta, grid, (lo, hi) in zip(args.betas, grids, levels):
        tag = f"beta{beta:g}"
        times = curves[f"times_{tag}"] = grid.times
        coarse, fine = both_levels(
            M, beta, times, name, params, (lo, hi), args.max_triangles, args.jobs, args.checkpoints
        )
        curves[f"mesh_coarse_{tag}"], curves[f"to_V_coarse_{tag}"] = coarse[:2]
        curves[f"mesh_fine_{tag}"], curves[f"to_V_fine_{tag}"] = fine[:2]
        curves[f"levels_{tag}"] = np.array([lo, hi])
        curves[f"solve_{tag}"] = np.array([fine[2][k] for k in ("triangles", "nfev", "seconds")], dtype=float)
        curves[f"stopped_{tag}"] = np.array([coarse[2]["stopped"], fine[2]["stopped"]])
        reference = reference_departure(times, curves[f"mesh_fine_{tag}"], geometry[0])
        for n in args.tokens:
            dist = particle_run(M, beta, X0[:, :n], grid, log)
            curves[f"particles_N{n}_{tag}"] = dist
            curves[f"shift_N{n}_{tag}"] = particle_shift(times, reference_until(times, curves, tag), dist, reference,
                                                         geometry[0])  # fmt: skip
        rows.append(beta_row(beta, curves, geometry, args.tokens))
        log(f"beta {beta:g}: {rows[-1]}")
        # written after every β, so a long run stopped later keeps what it finished (the stamp says which β)
        done = len(rows) == len(args.betas)
        stamp = harness.stamp(command, "sphere-departure", revision=commit, seconds=time.perf_counter() - wall) + (
            "" if done else f" So far the first {len(rows)} of {len(args.betas)} β."
        )
        write_outputs(args, exp, geometry, curves, rows, stamp)
        if args.checkpoints:  # the β is in the npz now: its checkpoints go, as a pipeline job's do once it is written
            for level in (lo, hi):
                checkpoint.discard(checkpoint.MeshCheckpoint(level_checkpoint(args.checkpoints, beta, level), ""))
    return 0


def levels_per_beta(levels: list[int], n_betas: int) -> list[tuple[int, int]]:
    """(coarse, fine) per β of ``--levels``: one pair for every β, or one pair per β."""
    if len(levels) not in (2, 2 * n_betas):
        raise SystemExit("sphere_departure: --levels takes one pair, or one pair per beta")
    pairs = [tuple(levels[2 * k : 2 * k + 2]) for k in range(len(levels) // 2)]
    return pairs * n_betas if len(pairs) == 1 else pairs


def shared_settings(args, cfg: dict | None = None) -> dict:
    """The settings every β of one page must share (``render`` refuses npz files that differ in them): with the
    run's config ``cfg``, the experiment as it ran (its block, schema defaults filled in, and the root seed), so a
    page renders the matrices, dt and tolerance its curves were computed with whatever the config file says now."""
    ran = {"config": args.config, "experiment": args.experiment, "replicas": args.replicas,
           "max_triangles": args.max_triangles}  # fmt: skip
    if cfg is not None:
        ran.update(block=cfg["experiments"][args.experiment], root_seed=cfg["root_seed"])
    return ran


def end_phase_geometry(M, exp: dict) -> tuple[float, float]:
    """(the distance between E1(A) and V's leading eigenspace, which the departure rule halves; Conjecture 1's
    tolerance, the experiment's ``claims.end_phase_tolerance``)."""
    gap = float(projection.distance_to_eigenspace(M.E1_V_real[:, :1].T[None], M.E1)[0])
    return gap, float(exp["claims"]["end_phase_tolerance"])


def reference_until(times, curves, tag: str) -> float:
    """The last snapshot the reference (fine level) reached: its solve stops at the first snapshot with more than
    ``--max-triangles`` triangles or where the flow outran what it resolves, its distances NaN after."""
    return float(times[np.isfinite(curves[f"mesh_fine_{tag}"])][-1])


def beta_row(beta: float, curves: dict, geometry: tuple[float, float], tokens: list[int]) -> dict:
    """The page's numbers at β, from the npz's arrays alone (so ``render`` rebuilds them without a run): the
    departures of both levels and of the particles at each of ``tokens`` (NaN, 'not run', where the npz has no such
    N at this β), the reference's error, where it ends, and the solve's cost where recorded."""
    gap, tolerance = geometry
    tag = f"beta{beta:g}"
    times, fine, coarse = curves[f"times_{tag}"], curves[f"mesh_fine_{tag}"], curves[f"mesh_coarse_{tag}"]
    until = reference_until(times, curves, tag)
    reference = level_departures(times, fine, coarse, gap)
    lo, hi = (int(v) for v in curves[f"levels_{tag}"])
    triangles, nfev, seconds = curves.get(f"solve_{tag}", np.full(3, np.nan))
    row = {
        "beta": beta,
        "interval": float(times[1] - times[0]),
        "still": until if reference["censored"] else np.nan,  # the reference still metastable at its last snapshot
        "horizon": float(times[-1]),
        "levels": f"{hi} / {lo}",
        "mesh": describe_departure(times, fine, gap),
        "mesh_coarse": describe_departure(times, coarse, gap),
        "end": describe_end_phase(times, fine, curves[f"to_V_fine_{tag}"], gap, tolerance),
        "end_coarse": describe_end_phase(times, coarse, curves[f"to_V_coarse_{tag}"], gap, tolerance),
        "end_time": until,
        **reference,
        "resolved_coarse": float(times[np.isfinite(coarse)][-1]),
        "error": float(np.nanmax(np.abs(fine - coarse))),
        "resolved": until,
        "triangles": triangles,
        "nfev": nfev,
        "seconds": seconds,
        # why each level (coarse, fine) stopped before the horizon ('' where it did not; an npz that predates the
        # record says nothing)
        "stopped_why": [str(v) for v in curves.get(f"stopped_{tag}", ["", ""])],
    }
    replicas = max(v.shape[0] for k, v in curves.items() if k.startswith("particles_"))
    for n in tokens:
        dist = curves.get(f"particles_N{n}_{tag}")
        row[f"N{n}"] = "not run" if dist is None else describe_departure(times, dist, gap)
        row[f"N{n}_gap"] = np.nan if dist is None else float(np.nanmax(np.abs(dist - fine[None])))
        row[f"N{n}_shift"] = curves.get(f"shift_N{n}_{tag}", np.full(replicas, np.nan))
    return row


def write_outputs(args, exp, geometry, curves, rows, stamp) -> None:
    """The npz (``--out``), the picture (``--figure``) and the page (``--markdown``), whichever were asked for; the
    page links the picture only where one was drawn (an older one at that path is removed, not left to be read as
    this one)."""
    if args.out:
        np.savez(args.out, **curves, stamp=stamp)
    drawn = bool(args.figure) and regime_figure(args, rows)
    if args.figure and not drawn and os.path.exists(args.figure):
        os.remove(args.figure)
    if args.markdown:
        write_markdown(args, exp, geometry, curves, rows, stamp, drawn)


def recorded(path: str) -> tuple[dict, dict]:
    """(arrays, shared settings) of a study's npz; each β's ``levels_*`` and ``stamp_*`` filled in where the npz
    predates them, from the command its stamp names (the command that wrote it), and the experiment's block from
    the config file as it is now where the npz did not record it. SystemExit naming the file where it is not a
    study's npz."""
    try:
        with np.load(path) as z:
            curves = {k: z[k] for k in z.files}
        stamp = str(curves.pop("stamp"))
        settings = json.loads(str(curves.pop("arguments", "{}")))
        if "block" in settings:
            return _stamped(curves, stamp), settings
        ran = parser().parse_args(shlex.split(stamp.split("`")[1])[2:])
        for beta, pair in zip(ran.betas, levels_per_beta(ran.levels, len(ran.betas))):
            if f"times_beta{beta:g}" in curves:
                curves.setdefault(f"levels_beta{beta:g}", np.array(pair))
        missing = [k for k in curves if k.startswith("times_") and k.replace("times_", "levels_") not in curves]
        if missing:
            raise ValueError(f"its stamp's command has no levels for {', '.join(missing)}")
    except (OSError, KeyError, IndexError, ValueError, SystemExit) as err:
        raise SystemExit(f"sphere_departure: {path} is not a study npz this can render ({err})") from None
    cfg, _ = sphere_experiment(ran.config, ran.experiment, "sphere_departure")  # the config as it is now
    return _stamped(curves, stamp), json.loads(json.dumps(shared_settings(ran, cfg)))


def _stamped(curves: dict, stamp: str) -> dict:
    """``curves`` with every β that has no run of its own recorded (``stamp_*``) given the file's ``stamp``."""
    for key in [k for k in curves if k.startswith("times_beta")]:
        curves.setdefault(key.replace("times_", "stamp_"), np.array(stamp))
    return curves


def render(args, command: str) -> int:
    """``--render``: the page, figure and npz of the β in the given npz files together, nothing run; the npz
    files must share their settings (``shared_settings``: the experiment as it was run, replicas, max_triangles)
    and snapshot interval, and no β may be in two of them. The stamp names this command and, per β, the run that
    computed it. An npz that predates its recorded experiment is read with the config file as it is now
    (``recorded``)."""
    given = [o for o in RUN_OPTIONS if getattr(args, o) != parser().get_default(o)]
    if given:
        raise SystemExit(f"sphere_departure: --render runs nothing and takes no {', '.join(given)}")
    curves, settings = {}, None
    for path in args.render:
        more, theirs = recorded(path)
        if settings is not None and theirs != settings:
            raise SystemExit(f"sphere_departure: {path} was run with {theirs}, the others with {settings}")
        twice = [k for k in more if k.startswith("times_") and k in curves]
        if twice:
            raise SystemExit(f"sphere_departure: {path} repeats {', '.join(twice)}: each β from one run")
        settings = theirs
        curves.update(more)
    vars(args).update(settings)
    exp = settings["block"]
    M = experiment.build_matrices(args.experiment, exp, settings["root_seed"])
    betas = sorted(float(k.removeprefix("times_beta")) for k in curves if k.startswith("times_beta"))
    intervals = [float(np.diff(curves[f"times_beta{b:g}"][:2])[0]) for b in betas]
    if not np.allclose(intervals, intervals[0], rtol=1e-9, atol=0.0):  # one linspace's rounding apart is one
        raise SystemExit(f"sphere_departure: the npz files' snapshot intervals differ ({sorted(set(intervals))})")
    args.tokens = sorted({int(k.split("_")[1].removeprefix("N")) for k in curves if k.startswith("particles_")})
    geometry = end_phase_geometry(M, exp)
    rows = [beta_row(b, curves, geometry, args.tokens) for b in betas]
    curves["arguments"] = np.array(json.dumps(settings))  # so the npz written renders again
    closing = " Do not edit: regenerate."
    stamp = harness.stamp(command, "sphere-departure").removesuffix(closing).rstrip(".")
    stamp += f", from {_runs(curves, betas)}."
    write_outputs(args, exp, geometry, curves, rows, stamp + closing)
    return 0


#: the options of a run, which ``--render`` does not take
RUN_OPTIONS = (
    "config", "experiment", "betas", "levels", "horizons", "tokens", "replicas", "max_triangles", "jobs", "checkpoints",
)  # fmt: skip


def _runs(curves: dict, betas: list[float]) -> str:
    """Which run computed which β: each run's stamp (its command, commit, machine, time) after its β."""
    runs: dict[str, list[str]] = {}
    for b in betas:
        run = str(curves[f"stamp_beta{b:g}"]).removeprefix("Generated by ").replace(" Do not edit: regenerate.", "")
        _, command, rest = run.split("`", 2)  # the command as a stamp names it now: no output path
        words = shlex.split(command)
        runs.setdefault(f"`{netcdf.report_command(words[1], words[2:])}`{rest}".rstrip("."), []).append(f"{b:g}")
    return "; ".join(f"β = {', '.join(bs)}: the run of {run}" for run, bs in runs.items())


def regime(args, rows) -> tuple[np.ndarray, np.ndarray]:
    """(stands (beta, tokens): 1 where the particles stand for the mean field, 0 where not, NaN not judged;
    departure shifts (beta, tokens, replica)) of the β finished so far."""
    shift = np.array([[r[f"N{n}_shift"] for n in args.tokens] for r in rows], dtype=float)
    return stands_for(shift, rows[0]["interval"]), shift


def regime_figure(args, rows) -> bool:
    """The (log N, log β) picture of the β finished so far, each point labelled with the particles' largest
    difference from the reference in the distance to E1(A); whether one was drawn (only β judged at every N are)."""
    stands, _ = regime(args, rows)
    if np.all(np.any(np.isnan(stands), axis=1)):
        log("  no β judged at every N yet: no picture")  # the picture draws only those (regimes)
        return False
    gaps = np.array([[r[f"N{n}_gap"] for n in args.tokens] for r in rows])
    fig = regimes.plot_particle_regime(
        [r["beta"] for r in rows], args.tokens, stands, gaps, 3,
        error_label="largest difference in the distance to E1(A) from the reference",
        horizon=[r["still"] for r in rows],
    )  # fmt: skip
    fig.savefig(args.figure, dpi=130)
    return True


def write_markdown(args, exp, geometry, curves, rows, stamp, figure: bool = False) -> None:
    """The page: one row per β (departures, the reference's error, the particles' distance to it, cost), where the
    mean field ends (``geometry``: the gap between the eigenspaces and Conjecture 1's tolerance), then per β the
    distance to E1(A) at every 4th snapshot."""
    gap, tolerance = geometry
    lines = [
        f"# The d = 3 mean field of `{args.experiment}` against its particles (generated)",
        "",
        stamp,
        "",
        f"Experiment `{args.experiment}` of `{args.config}` (d = 3, its matrices and initial measure, no symmetry). "
        "Mean field: the S² mesh solver (docs/sphere_mean_field.md) from two icosphere levels (in the table), "
        f"with the pipeline's reference settings (`make sphere`): remeshed every {REFERENCE_REMESH_EVERY:g} to the "
        f"level's edge, DOP853 at rtol {REFERENCE_RTOL:g}, the softmax at the level's variation (finer on a level "
        "coarser than the kernel); the finer level is the reference and the largest difference between the two its "
        f"error estimate; a mesh run stops at the first snapshot with more than {args.max_triangles} triangles, or "
        "where the flow outruns what it resolves (listed below the table with the solver's reason; its error and its "
        "distance to the particles are taken up to there). Particles: the dense kernel, "
        f"RK4 at dt = {exp['time']['dt']:g}, from the experiment's own initial tokens ({args.replicas} replicas). "
        f"Departure: the first time after the metastable phase that the distance to E1(A) exceeds half the "
        f"distance between E1(A) and V's leading eigenspace ({gap / 2:.3f}); '> T': still metastable at T.",
        "",
        "| β | horizon | levels | mean-field departure (fine / coarse level) | "
        "reference error (largest, distance to E1(A)) | "
        + " | ".join(
            f"particles N = {n}: departure per replica | largest distance to the reference" for n in args.tokens
        )
        + " | triangles at the last snapshot | field evaluations | seconds ('—': not recorded by its run) |",
        "|---" * (8 + 2 * len(args.tokens)) + "|",
    ]
    for r in rows:
        cells = [f"{r['beta']:g}", f"{r['horizon']:g}", r["levels"], f"{r['mesh']} / {r['mesh_coarse']}"]
        cells.append(f"{r['error']:.2e} (to t = {r['resolved']:g})")
        for n in args.tokens:
            cells += [r[f"N{n}"], "—" if np.isnan(r[f"N{n}_gap"]) else f"{r[f'N{n}_gap']:.3f}"]
        cells += [_count(r["triangles"]), _count(r["nfev"]), _count(r["seconds"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += stopped_lines(rows)
    stands, shift = regime(args, rows)
    betas = [r["beta"] for r in rows]
    lines += [
        "",
        "## Where the mean field ends",
        "",
        "Conjecture 1: after the metastable phase the tokens concentrate on V's leading eigenspace (largest real "
        f"part). Per β the mean field's distance to it at the last snapshot its solve reached, 'on it' within "
        f"{tolerance:g} (`claims.end_phase_tolerance`, the pipeline's `conjecture_1`), 'still approaching' where "
        "it fell by more than a tenth over the run's last tenth (a longer horizon would say where it settles), "
        "'moving away from it' where it rose by as much, 'off it' otherwise, with its change over the run's last "
        "tenth (less than a tenth either way: whether it has settled there a longer horizon would say); 'not "
        "departed' where it is still metastable at its last snapshot, 'too late to read' where it departed within "
        "the run's last tenth:",
        "",
        "| β | last snapshot | fine level | coarse level |",
        "|---|---|---|---|",
        *(f"| {r['beta']:g} | {r['end_time']:g} | {r['end']} | {r['end_coarse']} |" for r in rows),
        "",
        *departure_law_lines(rows),
        "",
        *threshold_lines(threshold_sweep(rows, curves, gap), gap),
        "",
        "## Where the particles stand for the mean field",
        "",
        f"Per (β, N): 'yes' where every replica departs within one snapshot interval ({rows[0]['interval']:g}) of "
        "the reference, compared on the snapshots the reference resolves ('no (off by Δt = inf)' where one "
        "departed and the other did not, a departure after the horizon counting as none; '-': not judged, where "
        "the reference stopped early (max_triangles, or the flow outran it) still metastable and the particles were "
        "too, or before it had "
        "arrived at the metastable phase, or not run at that N; the picture draws the β judged at every N).",
        "",
        regime_table(betas, args.tokens, stands, shift, [r["still"] for r in rows]),
        "",
        boundary_summary(betas, args.tokens, stands, 3, [r["still"] for r in rows]),
    ]
    if figure:
        lines += ["", f"![where particles stand for the mean field in d = 3]({_relative(args.figure, args.markdown)})"]
    for r in rows:
        tag = f"beta{r['beta']:g}"
        times = curves[f"times_{tag}"]
        keys = [k for k in curves if k.endswith(tag) and k.startswith(("mesh_", "particles_"))]  # the curves
        keys.append(f"to_V_fine_{tag}")
        lines += [
            "",
            f"Distance to E1(A) at β = {r['beta']:g}, every 4th snapshot (particles: one value per replica), and the "
            "fine level's distance to V's leading eigenspace (last column):",
            "",
        ]
        labels = [k.removesuffix("_" + tag).replace("_", " ") for k in keys[:-1]] + ["mesh fine: to E1(V)"]
        lines.append("| t | " + " | ".join(labels) + " |")
        lines.append("|---" * (len(keys) + 1) + "|")
        for k in range(0, times.size, 4):
            vals = [np.atleast_2d(curves[key])[:, k] for key in keys]
            lines.append(f"| {times[k]:g} | " + " | ".join(" / ".join(f"{v:.4f}" for v in val) for val in vals) + " |")
    with open(args.markdown, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def stopped_lines(rows) -> list[str]:
    """The page's list of the mesh runs that ended before their horizon, each with the solver's reason (none where
    every run reached it)."""
    stops = [
        f"- β = {r['beta']:g}, {which} level: {why}"
        for r in rows
        for which, why in zip(("coarse", "fine"), r["stopped_why"])
        if why
    ]
    if not stops:
        return []
    return ["", "Mesh runs that ended before their horizon, with the solver's reason (their distances end there):",
            "", *stops]  # fmt: skip


def _count(value) -> str:
    """A whole number of the table, '—' where the run did not record it."""
    return f"{value:.0f}" if np.isfinite(value) else "—"


def _relative(path: str, page: str) -> str:
    """``path`` as the page ``page`` links it."""
    return os.path.relpath(path, os.path.dirname(page) or ".")


if __name__ == "__main__":
    raise SystemExit(main())
