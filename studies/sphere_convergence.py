"""Convergence of the d = 3 mean-field reference in each of its resolutions: mesh size, pruning depth, time tolerance,
remeshing interval.

At one β, the general S² solver (``lowtemp.dynamics.sphere_meanfield``) on a d = 3 experiment's own matrices and
initial measure, from the pipeline's reference settings (``sphere_meanfield.reference_settings``) with one
resolution varied at a time: the icosphere level (and with it the remeshing edge, 1.5 times the initial one), the
pruning depth (a triangle below e^{−depth} of the proven lower bound of Z is skipped), the integrator's rtol (atol
a hundredth of it), the time between remeshings (the snapshots between two remeshings are read from the steps'
dense output and change nothing). Every run carries the experiment's first replica of initial tokens as tracers.

Per run: the distance to E1(A) per snapshot and the departure by the pipeline's geometric rule
(``fitting.geometric_departure``). Per family, against its finest member: the largest difference of that distance,
the largest root mean square distance between the same tracers (an upper bound of W2 between the two push-forwards
of the tokens), the departure's shift in snapshot intervals, and where the family has three members the observed
order of convergence from the three-grid ratio. A family is *stable* when every member's departure lies within one
snapshot interval of the finest member's (``fitting.departure_shift``, the rule by which the pipeline compares its
reference's two levels).

Writes a Markdown page (``--markdown``) after every run, so a stopped run keeps what it finished, and the curves
(``--out``, npz), stamped with the command, commit, CPU and wall time. Method: docs/sphere_mean_field.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time

import numpy as np
from sphere_departure import describe_departure, log, sphere_experiment

from lowtemp.analysis import fitting
from lowtemp.config import experiment
from lowtemp.dynamics import sphere_levels, sphere_meanfield
from lowtemp.model import measures, projection
from lowtemp.model.seeding import generator
from lowtemp.store import harness

#: the four resolutions, the settings field each varies, and which end of its values is the finest
FAMILIES = {
    "level": ("mesh level (edge halves per level)", max),
    "depth": ("pruning depth (e-folds)", max),
    "rtol": ("time tolerance (rtol)", min),
    "remesh": ("remeshing interval (time)", min),
}


#: differences of the distance to E1(A) below this are the base's own floor (its pruning at depth 20 moves the
#: distance by about 10⁻⁹): members that differ by less are not in the range where the error behaves like a power
#: of the resolution, and no order is read off them
ORDER_FLOOR = 1e-8


def observed_order(coarse_gap: float, fine_gap: float, ratio: float) -> float:
    """Order p of convergence from three members whose resolution grows by ``ratio`` each: the largest difference
    between the coarse and middle members over the largest between the middle and fine, = ratio^p (the three-grid
    estimate); NaN where the differences do not fall with the resolution (the finer one zero, or not below the
    coarser) or lie below ``ORDER_FLOOR``: the members are not in the range where the error behaves like a power
    of it."""
    if not (fine_gap > 0 and coarse_gap > fine_gap and fine_gap >= ORDER_FLOOR):
        return math.nan
    return math.log(coarse_gap / fine_gap) / math.log(ratio)


def run(M, beta, times, name, params, X0, setting, max_triangles, log):
    """One solve of ``setting`` (level, depth, rtol, remeshing interval): (distance to E1(A) per snapshot, tracers
    (time, token, 3), info)."""
    level, depth, rtol, remesh = setting
    level = int(level)
    settings = dataclasses.replace(
        sphere_meanfield.reference_settings(level, max_triangles, sphere_levels.reference_variation(level, M.B, beta)),
        depth=depth,
        rtol=rtol,
        atol=rtol * 1e-2,
        remesh_every=remesh,
    )
    mesh = sphere_meanfield.initial_mesh(name, params, level)
    start = time.perf_counter()

    def progress(t, info):
        log(
            f"  {describe(setting)}: t = {t:g}, {info['triangles']} triangles, "
            f"{info['nfev']} evaluations, {time.perf_counter() - start:.0f} s"
        )

    sol = sphere_meanfield.solve(M.B, M.V, beta, times, mesh, X0, settings=settings, progress=progress)
    info = {
        "triangles": int(sol.diagnostics["triangles"][-1]),
        "nfev": sol.info["nfev"],
        "seconds": sol.info["seconds"],
        "resolved": float(sol.info["resolved_until"]),
    }
    return sol.distance_to_eigenspace(M.E1), sol.tracers, info


def compare(members: list[dict], times, gap: float, interval: float) -> dict:
    """A family's members (``value``, ``dist``, ``tracers``) against its finest (the last), on the snapshots every
    member reached: per member the largest |Δ distance|, the largest RMS tracer distance, the departure and whether
    it agrees; the family's order, and its stability, judged only where every member reached the horizon (a run
    stopped early by max_triangles would compare metastable curves cut short: ``complete`` False)."""
    finest = members[-1]
    reached = int(min(np.sum(np.isfinite(m["dist"])) for m in members))
    ref_dep, ref_cens = fitting.geometric_departure(times[:reached], finest["dist"][:reached], gap)
    rows = []
    for m in members:
        dep, cens = fitting.geometric_departure(times[:reached], m["dist"][:reached], gap)
        gaps = np.linalg.norm(m["tracers"][:reached] - finest["tracers"][:reached], axis=-1)
        rows.append(
            {
                "value": m["value"],
                "dist_gap": float(np.max(np.abs(m["dist"][:reached] - finest["dist"][:reached]))),
                "tracer_rms": float(np.max(np.sqrt(np.mean(gaps**2, axis=-1)))),
                "departure": describe_departure(times[:reached], m["dist"][:reached], gap),
                "agrees": bool(fitting.departure_shift(dep, cens, ref_dep, ref_cens) <= interval * (1 + 1e-9)),
                "info": m["info"],
            }
        )
    order, gaps = math.nan, None
    if len(members) == 3:
        middle = members[1]["dist"][:reached]
        gaps = (
            float(np.max(np.abs(members[0]["dist"][:reached] - middle))),
            float(np.max(np.abs(middle - finest["dist"][:reached]))),
        )
        order = observed_order(*gaps, members[0]["ratio"])
    complete = reached == len(times)
    return {
        "rows": rows,
        "complete": complete,
        "stable": complete and all(r["agrees"] for r in rows),
        "order": order,
        "gaps": gaps,
        "last": float(times[reached - 1]),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/sphere.yaml")
    ap.add_argument("--experiment", default="concentration_mean_field")
    ap.add_argument("--beta", type=float, default=10.0)
    ap.add_argument("--horizon", type=float, default=6.0)
    ap.add_argument(
        "--base",
        type=float,
        nargs=4,
        default=[3, sphere_levels.REFERENCE_DEPTH, sphere_levels.REFERENCE_RTOL, sphere_levels.REFERENCE_REMESH_EVERY],
        metavar=("LEVEL", "DEPTH", "RTOL", "REMESH"),
        help="the settings every family varies one of (default: the reference's at level 3)",
    )
    ap.add_argument("--levels", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--depths", type=float, nargs="+", default=[10.0, 20.0, 40.0])
    ap.add_argument("--rtols", type=float, nargs="+", default=[1e-2, 1e-3, 1e-4])
    ap.add_argument(
        "--remeshes",
        type=float,
        nargs="+",
        default=[0.25, 0.125, 0.0625],
        help="remeshing intervals, each dividing the snapshot interval",
    )
    ap.add_argument("--tokens", type=int, default=256, help="tracers: the first replica's first tokens")
    ap.add_argument("--max-triangles", type=int, default=60000)
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    wall = time.perf_counter()
    commit = harness.commit()  # the code that runs: read before the (long) run
    command = harness.command(__file__, argv if argv is not None else sys.argv[1:])
    cfg, exp = sphere_experiment(args.config, args.experiment, "sphere_convergence")
    values = {"level": args.levels, "depth": args.depths, "rtol": args.rtols, "remesh": args.remeshes}
    if args.base[0] != int(args.base[0]):
        raise SystemExit(f"sphere_convergence: the base level must be an integer, got {args.base[0]:g}")
    base = dict(zip(FAMILIES, (int(args.base[0]), *map(float, args.base[1:]))))
    for family, given in values.items():
        if base[family] not in given:
            flag = "--remeshes" if family == "remesh" else f"--{family}s"
            raise SystemExit(f"sphere_convergence: the base {family} {base[family]:g} must be among {flag}")
    M = experiment.build_matrices(args.experiment, exp, cfg["root_seed"])
    name, params = experiment.measure_of(exp)
    mesh_name, mesh_params = experiment.initial_measure(args.experiment, exp, cfg["root_seed"])
    rng = generator(cfg["root_seed"], experiment.stream_name(args.experiment, exp), "initial_tokens")
    # the pipeline's first replica (the same stream and draw as its initial_tokens.nc), its first tokens
    X0 = measures.sample_initial_tokens(name, rng, exp["replicas"], exp["tokens"], 3, **params)[0, : args.tokens]
    gap = float(projection.distance_to_eigenspace(M.E1_V_real[:, :1].T[None], M.E1)[0])
    grid = experiment.time_grid(exp, args.horizon)
    times, interval = grid.times, grid.horizon / grid.snapshots
    check_remeshes(args.remeshes)
    sphere_meanfield.check_inputs(M.B, M.V, args.beta, times, sphere_meanfield.reference_settings(base["level"], None))
    runs: dict[tuple, dict] = {}
    # every distinct setting once, cheapest first (the base shared by the four families), the page after each
    order = sorted(
        {tuple({**base, f: v}.values()) for f, vs in values.items() for v in vs},
        key=lambda s: (s[0], s[1], -s[2], -s[3]),
    )
    for setting in order:
        dist, tracers, info = run(M, args.beta, times, mesh_name, mesh_params, X0, setting, args.max_triangles, log)
        runs[setting] = {"dist": dist, "tracers": tracers, "info": info}
        log(f"{describe(setting)}: {info}")
        families = family_results(values, base, runs, times, gap, interval)
        done = len(runs) == len(order)
        stamp = harness.stamp(command, "sphere-convergence", revision=commit, seconds=time.perf_counter() - wall) + (
            "" if done else f" So far {len(runs)} of {len(order)} runs."
        )
        if args.out:
            np.savez(
                args.out,
                times=times,
                stamp=stamp,
                **{"dist_" + "_".join(f"{f}{v:.12g}" for f, v in zip(FAMILIES, s)): r["dist"] for s, r in runs.items()},
            )
        if args.markdown:
            write_markdown(args, gap, interval, families, stamp)
    return 0


def describe(setting) -> str:
    """'level 3, depth 20, rtol 0.001, remesh 0.25' for a run's setting."""
    return ", ".join(f"{f} {v:g}" for f, v in zip(FAMILIES, setting))


def check_remeshes(remeshes) -> None:
    """SystemExit unless every remeshing interval is finite and positive (the snapshots need not fall on the
    remeshings: those between two are read from the steps' dense output)."""
    for r in remeshes:
        if not (math.isfinite(r) and r > 0):
            raise SystemExit(f"sphere_convergence: the remeshing interval must be finite and > 0, got {r:g}")


def family_results(values, base, runs, times, gap, interval) -> dict:
    """Each family of two or more values whose members have all run, compared against its finest member (a family
    of one value, the base alone, compares nothing and is left off)."""
    out = {}
    for family, given in values.items():
        if len(set(given)) < 2:
            continue
        finest = FAMILIES[family][1]
        ordered = sorted(given, key=lambda v: v if finest is max else -v)  # coarsest first
        keys = [tuple({**base, family: v}.values()) for v in ordered]
        if not all(k in runs for k in keys):
            continue
        ratio = resolution_ratio(family, ordered)
        members = [{"value": v, "ratio": ratio, **runs[k]} for v, k in zip(ordered, keys)]
        out[family] = compare(members, times, gap, interval)
    return out


def base_errors(families: dict, base: dict) -> dict:
    """Per family that has run, the base member's largest tracer RMS to the family's finest member."""
    out = {}
    for family, result in families.items():
        rows = [r for r in result["rows"] if math.isclose(float(r["value"]), float(base[family]), rel_tol=1e-12)]
        if rows:
            out[family] = rows[0]["tracer_rms"]
    return out


def resolution_ratio(family: str, ordered) -> float:
    """The factor by which the resolution grows from one member to the next (coarsest first), where it is one
    factor (the three-grid order needs it): consecutive levels halve the edge (2); rtols or remeshing intervals in
    one geometric step (their ratio); NaN otherwise, and for the depth, whose pruned mass falls like e^{−depth}, not
    like a power."""
    ordered = [float(v) for v in ordered]
    if family == "level" and all(b - a == 1 for a, b in zip(ordered, ordered[1:])):
        return 2.0
    steps = [a / b for a, b in zip(ordered, ordered[1:])]
    if family in ("rtol", "remesh") and steps and all(math.isclose(q, steps[0], rel_tol=1e-9) for q in steps):
        return steps[0]
    return math.nan


def members_ratio(family: str, result: dict) -> float:
    """The family's resolution step (``resolution_ratio``) from its rows' values."""
    return resolution_ratio(family, [r["value"] for r in result["rows"]])


def write_markdown(args, gap, interval, families, stamp) -> None:
    """The page: per family a row per member (departure, agreement, differences to the finest member, cost)."""
    lines = [
        f"# Convergence of the d = 3 mean-field reference at β = {args.beta:g} (generated)",
        "",
        stamp,
        "",
        f"Experiment `{args.experiment}` of `{args.config}` (d = 3, its matrices and initial measure, no symmetry), "
        f"β = {args.beta:g}, to t = {args.horizon:g}, snapshots every {interval:g}; {args.tokens} of its initial "
        "tokens carried as tracers. Every run takes the pipeline's reference settings (docs/sphere_mean_field.md, "
        f'"In the pipeline") with level {args.base[0]:g}, pruning depth {args.base[1]:g}, rtol {args.base[2]:g}, '
        f"remeshing every {args.base[3]:g} (the snapshots between two remeshings read from the steps' dense output), "
        "and varies one of the four. Against the family's finest member (its "
        "last row): the largest difference of "
        "the distance to E1(A) (sqrt(∫ 2 − 2|P1 x| dρ)), the largest root mean square distance between the same "
        "tracers (an upper bound of W2 between the push-forwards of the tokens), and whether the departure "
        f"(the first time after the metastable phase that the distance exceeds {gap / 2:.3f}, half the gap to V's "
        "leading eigenspace) lies within one snapshot interval of the finest member's. The order is the three-grid "
        "estimate log(max|d₁ − d₂| / max|d₂ − d₃|) / log(ratio of the resolutions).",
        "",
    ]
    limits = base_errors(families, dict(zip(FAMILIES, args.base)))
    if limits and max(limits.values()) > 0:  # all zero: the base is every family's finest, nothing to name
        worst = max(limits, key=limits.get)
        lines += [
            "The base setting's largest tracer RMS to each family's finest member (what refining that resolution "
            "alone would move its tracers): "
            + ", ".join(f"{FAMILIES[f][0].split(' (')[0]} {v:.2e}" for f, v in limits.items())
            + f"; the {FAMILIES[worst][0].split(' (')[0]} limits the base most.",
            "",
        ]
    for family, result in families.items():
        label = FAMILIES[family][0]
        verdict = (
            ("stable" if result["stable"] else "NOT stable") + " to one snapshot interval"
            if result["complete"]
            else f"not judged (a run stopped at t = {result['last']:g}, above max_triangles)"
        )
        order = "" if math.isnan(result["order"]) else f"; observed order {result['order']:.2f}"
        if math.isnan(result["order"]) and result["gaps"] and not math.isnan(members_ratio(family, result)):
            why = (
                f"lie below {ORDER_FLOOR:g}, the base's own floor"
                if min(result["gaps"]) < ORDER_FLOOR
                else "do not fall with the resolution"
            )
            order = "; the differences {} ({:.2e}, then {:.2e}): no order".format(why, *result["gaps"])
        lines += [
            f"## {label}: departures {verdict}{order}",
            "",
            f"| {family} | departure | within one interval | max \\|Δ distance\\| | max tracer RMS | triangles at the "
            "last snapshot | field evaluations | seconds |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in result["rows"]:
            info = r["info"]
            lines.append(
                f"| {r['value']:g} | {r['departure']} | {'yes' if r['agrees'] else 'NO'} | {r['dist_gap']:.2e} | "
                f"{r['tracer_rms']:.2e} | {info['triangles']} | {info['nfev']} | {info['seconds']:.0f} |"
            )
        lines.append("")
    with open(args.markdown, "w") as fh:
        fh.write("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
