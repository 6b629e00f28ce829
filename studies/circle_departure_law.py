"""Which law in β the circle's mean field departs by, at the rule's threshold and at others beside it.

For a d = 2 experiment (on the circle the mean field is one-dimensional, Eq. 2 solved by
``lowtemp.dynamics.meanfield`` with the pipeline's settings: cells of ``--width`` graded to ``--depth``, DOP853 at
the tolerances of the pipeline's reference), per β: the distance to E1(A) of the mean field at two cell widths,
``--width`` (the fine level, the reference) and twice it (the coarse level, its error estimate), each up to the
last snapshot float64 resolves its contracting cells (docs/mean_field.md, "Limits"). From these curves alone the
page reads, as docs/sphere_departure.md reads the d = 3 mean field's (``sphere_departure_law``):

* each β's departure by the pipeline's rule (``fitting.geometric_departure``: the distance rises through half the
  distance between E1(A) and V's leading eigenspace), and the law in β it follows (``metastable_log_beta``'s law
  test over the ranges the departures are known to: a snapshot interval and the coarse level's shift);
* the same at the thresholds q = 0.25 … 0.75 of that distance: whether the law is a property of the mean field or
  of where the rule puts its threshold.

No particles: the β may be any (the default adds quarter decades to the experiment's). The curves go to an npz
(``--out``); ``--render`` rebuilds the page from it, or from several runs' npz files (their β merged), without a
solve.

    python studies/circle_departure_law.py config/mean_field_circle.yaml --out docs/data/circle_departure_law.npz \
        --markdown docs/circle_departure_law.md

`make circle-departure-law` regenerates docs/circle_departure_law.md (in two runs, rendered together).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from sphere_departure_law import (
    departure_cell,
    departure_law_lines,
    level_departures,
    threshold_lines,
    threshold_sweep,
)

from lowtemp.analysis import fitting
from lowtemp.config import experiment, schema, validation
from lowtemp.dynamics import integrate, meanfield, reduction
from lowtemp.stages.simulate import MEAN_FIELD_ATOL, MEAN_FIELD_RTOL
from lowtemp.store import harness

#: quarter decades from 10 to 100, then 316
DEFAULT_BETAS = (10.0, 17.8, 31.6, 56.2, 100.0, 316.0)
LEVELS = ("fine", "coarse")


def log(msg: str) -> None:
    """A progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default="config/mean_field_circle.yaml")
    ap.add_argument("--experiment", help="a d = 2 experiment of the config (default: its first)")
    ap.add_argument("--betas", type=float, nargs="+", default=list(DEFAULT_BETAS))
    ap.add_argument("--horizon", type=float, help="default: the experiment's (rounded to a snapshot)")
    ap.add_argument("--width", type=float, default=0.05, help="the fine level's initial cell width (radians)")
    ap.add_argument("--depth", type=float, default=0.001, help="cells graded towards E1⊥ down to this distance")
    ap.add_argument("--out", help="write the curves here (npz)")
    ap.add_argument("--markdown", help="write the page here")
    ap.add_argument("--render", nargs="+", help="rebuild the page from these npz files (no solve)")
    return ap


def circle_experiment(args) -> tuple[str, dict, int]:
    """(name, experiment, root seed) of the config: SystemExit unless the experiment is d = 2 from the uniform
    measure (the law test reads one curve per β from ρ0 uniform, as the pipeline's circle experiments run)."""
    config = schema.load_config_file(args.config)
    validation.validate_config(config, harness.SCHEMA, configfiles=[args.config])
    name = args.experiment or next(iter(config["experiments"]))
    exp = config["experiments"][name]
    if exp["dim"] != 2 or exp["initial_measure"]["name"] != "uniform":
        raise SystemExit(f"circle_departure_law: {name} must be d = 2 from the uniform measure")
    return name, exp, int(config["root_seed"])


def time_grid(exp: dict, horizon: float | None) -> integrate.TimeGrid:
    """The experiment's snapshots (interval and dt), up to ``horizon`` where given (``experiment.time_grid``)."""
    if horizon is not None and not horizon > 0:
        raise SystemExit(f"circle_departure_law: --horizon must be positive, got {horizon:g}")
    return experiment.time_grid(exp, horizon)


def solve_curves(red, beta: float, times, width: float, depth: float, E1) -> dict:
    """{level: (distance to E1(A) per snapshot, NaN beyond the last one resolved; seconds; cells at the end)} of the
    mean field at β with cells of ``width`` (fine) and twice it (coarse)."""
    out = {}
    for level, w in zip(LEVELS, (width, 2 * width)):
        start = time.perf_counter()
        sol = meanfield.solve(
            red, beta, times, width=w, depth=depth, rtol=MEAN_FIELD_RTOL, atol=MEAN_FIELD_ATOL, truncate=True
        )
        reached = times <= sol.info["resolved_until"]
        dist = np.full(times.size, np.nan)
        dist[reached] = sol.distance_to_eigenspace(E1)[reached]
        out[level] = (dist, time.perf_counter() - start, int(sol.info["cells"]))
        log(f"beta {beta:g} {level} (width {w:g}): resolved to {sol.info['resolved_until']:g}, {out[level][1]:.0f} s")
    return out


def last_resolved(curves: dict, beta: float, level: str) -> float:
    """The last snapshot at which a level's curve at β is resolved."""
    tag = f"beta{beta:g}"
    return float(curves[f"times_{tag}"][np.isfinite(curves[f"cells_{level}_{tag}"])][-1])


def common_end(curves: dict) -> dict:
    """The curves with both levels of every β cut at the earlier of their last resolved snapshots (NaN after it):
    the two widths lose float64 resolution at different times, and a level read further than its twin could depart
    where the twin cannot be read, which the law test would take for two levels that differ in kind."""
    out = dict(curves)
    for beta in betas_of(curves):
        tag = f"beta{beta:g}"
        levels = [f"cells_{level}_{tag}" for level in LEVELS]
        end = min(int(np.flatnonzero(np.isfinite(curves[k]))[-1]) for k in levels)
        for k in levels:
            out[k] = np.where(np.arange(curves[k].size) <= end, curves[k], np.nan)
    return out


def beta_row(beta: float, curves: dict, gap: float) -> dict:
    """The law test's row at β from the npz's arrays alone (cut at the levels' common end, ``common_end``): both
    levels' departures at the rule's threshold (``level_departures``), the snapshot interval and each level's last
    resolved snapshot."""
    tag = f"beta{beta:g}"
    times = curves[f"times_{tag}"]
    fine, coarse = curves[f"cells_fine_{tag}"], curves[f"cells_coarse_{tag}"]
    return {
        "beta": beta,
        "interval": float(times[1] - times[0]),
        "resolved": float(times[np.isfinite(fine)][-1]),
        "resolved_coarse": float(times[np.isfinite(coarse)][-1]),
        **level_departures(times, fine, coarse, gap),
    }


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    command = harness.command(__file__, argv if argv is not None else sys.argv[1:])
    if args.render:
        return write_page(args, recorded(args.render), command)
    if not (0 < args.width < 0.25 and args.depth > 0 and all(0 < b < np.inf for b in args.betas)):
        raise SystemExit(
            "circle_departure_law: --width must lie in (0, 0.25) (the coarse level takes twice it, below 0.5), "
            "--depth and every --betas must be positive and finite"
        )
    wall, commit = time.perf_counter(), harness.commit()
    name, exp, root_seed = circle_experiment(args)
    M = experiment.build_matrices(name, exp, root_seed)
    red = reduction.reduce(M.B, M.V)
    grid = time_grid(exp, args.horizon)
    settings = {"experiment": name, "config": args.config, "width": args.width, "depth": args.depth}
    curves = {"arguments": np.array(json.dumps(settings)), "gap": np.array(fitting.subspace_gap(M.E1, M.E1_V_real))}
    for beta in sorted(set(args.betas)):
        tag = f"beta{beta:g}"
        curves[f"times_{tag}"] = grid.times
        for level, (dist, seconds, cells) in solve_curves(red, beta, grid.times, args.width, args.depth, M.E1).items():
            curves[f"cells_{level}_{tag}"] = dist
            curves[f"cost_{level}_{tag}"] = np.array([seconds, cells], dtype=float)
        stamp = harness.stamp(command, "circle-departure-law", revision=commit, seconds=time.perf_counter() - wall)
        curves["stamp"] = np.array(stamp)
        if args.out:  # after every β, so a run stopped later keeps what it finished
            np.savez_compressed(args.out, **curves)
    return write_page(args, curves, None)


def recorded(paths: list[str]) -> dict:
    """The curves of one or more runs' npz files, their β merged (SystemExit where two runs differ in their
    settings or share a β); ``stamps``: each run's stamp and the β its npz holds (a run stopped early holds fewer
    than its command asked for: the npz is written after every β)."""
    curves, stamps = {}, []
    for path in paths:
        with np.load(path) as data:
            run = {k: data[k] for k in data.files}
        if curves and (str(run["arguments"]) != str(curves["arguments"]) or float(run["gap"]) != float(curves["gap"])):
            raise SystemExit(f"circle_departure_law: {path} was run with other settings than {paths[0]}")
        shared = set(betas_of(run)) & set(betas_of(curves))
        if shared:
            raise SystemExit(f"circle_departure_law: {path} repeats β = {sorted(shared)}")
        held = ", ".join(f"{b:g}" for b in betas_of(run))
        stamps.append(f"{run.pop('stamp')} (its npz holds β = {held})")
        curves.update(run)
    return {**curves, "stamps": stamps}


def betas_of(curves: dict) -> list[float]:
    """The β of an npz's curves, increasing."""
    return sorted(float(k.removeprefix("times_beta")) for k in curves if k.startswith("times_beta"))


def write_page(args, curves: dict, render_command: str | None) -> int:
    """The page from the curves (``render_command``: the --render command that rebuilds it, else the run's stamp
    alone)."""
    settings, gap = json.loads(str(curves["arguments"])), float(curves["gap"])
    ends = {b: [float(last_resolved(curves, b, level)) for level in LEVELS] for b in betas_of(curves)}
    curves = common_end(curves)
    rows = [beta_row(b, curves, gap) for b in betas_of(curves)]
    stamp = str(curves.get("stamp", ""))
    if render_command is not None:
        runs = curves["stamps"]
        stamp = f"{harness.stamp(render_command, 'circle-departure-law')} From the run{'s' * (len(runs) > 1)}: " + (
            "; ".join(runs)
        )
    lines = [
        "# Which law in β the circle's mean field departs by (generated)",
        "",
        stamp,
        "",
        f"Experiment `{settings['experiment']}` of `{settings['config']}` (d = 2: the mean field is one-dimensional, "
        "docs/mean_field.md). Per β the mean field from ρ0 uniform at two cell widths, "
        f"{settings['width']:g} (the fine level, the reference) and {2 * settings['width']:g} (the coarse level), "
        f"graded to {settings['depth']:g}, with the pipeline's tolerances, each to the last snapshot float64 "
        "resolves its contracting cells (both levels read up to the earlier of the two ends; 'stopped at T' below: "
        "a curve that ended there before it came within the threshold). Departure: the first time after the "
        "metastable phase that the distance to E1(A) exceeds half the distance between E1(A) and V's leading "
        f"eigenspace ({gap / 2:.3f}); '> T': "
        "still metastable at T, its last resolved snapshot. The same law test reads docs/sphere_departure.md's "
        "d = 3 mean field.",
        "",
        "| β | departure (fine / coarse level) | resolved to (fine / coarse) | seconds (fine / coarse) | cells at "
        "the end (fine / coarse) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        tag = f"beta{r['beta']:g}"
        (s_f, c_f), (s_c, c_c) = (curves[f"cost_{level}_{tag}"] for level in LEVELS)
        lines.append(
            f"| {r['beta']:g} | {departure_cell(r, '')} / {departure_cell(r, '_coarse')} | "
            f"{ends[r['beta']][0]:g} / {ends[r['beta']][1]:g} | {s_f:.0f} / {s_c:.0f} | {c_f:.0f} / {c_c:.0f} |"
        )
    lines += [""] + departure_law_lines(rows) + [""]
    lines += threshold_lines(threshold_sweep(rows, curves, gap, curve="cells"), gap)
    page = "\n".join(lines) + "\n"
    print(page)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
