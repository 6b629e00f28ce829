"""Does the mean field depart when the particles do? The circle's mean-field reference against particles.

For a d = 2 experiment of a config (any B, V: on the circle the mean field is one-dimensional), this
script solves the mean-field equation (Eq. 2) with ``lowtemp.dynamics.meanfield`` at every β of the experiment
and runs the particle system (the pipeline's dense kernel, RK4 at the experiment's step) at several N
from uniform tokens. For both it computes the distance to E1(A) ∩ S (``dist_leading_A``) and the
geometric departure time (``fitting.geometric_departure``: the first time, after reaching E1(A), that
this distance rises above half the distance between E1(A) and V's leading eigenspace), and, at every
snapshot, the particle error: W2 between the particle cloud and the reference's push-forward of the same
initial tokens (``transport.w2``). Per (β, N) the particles *stand for* the mean field where every replica
departs within one snapshot interval of it (``fitting.departure_shift``, on the snapshots the reference resolves);
``--figure`` draws where they do in (log N, log β) (``lowtemp.plotting.regimes``), beside the scaling at which
softmax attention over N keys turns selective. It prints a table and writes a markdown summary (``--markdown``)
and the curves as NetCDF (``--out``).

    python studies/mean_field_departure.py config/mean_field_circle.yaml --tokens 1024 4096 --replicas 2

The markdown names the commit, the CPU and the wall time; `make mean-field-departure` regenerates
docs/mean_field_departure.md with it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

from lowtemp.analysis import fitting
from lowtemp.config import schema, validation
from lowtemp.config.experiment import build_matrices
from lowtemp.dynamics import integrate, kernels, meanfield, reduction
from lowtemp.model import measures, projection, seeding
from lowtemp.plotting import regimes
from lowtemp.store import harness, netcdf
from lowtemp.store.harness import SCHEMA
from lowtemp.transport import w2 as transport

LOG = logging.getLogger("mean_field_departure")


def departure(times: np.ndarray, dist_A: np.ndarray, gap: float) -> str:
    """The departure time as text: a number, '> horizon' (censored) or 'never arrived'."""
    dep, censored = fitting.geometric_departure(times, dist_A[None, :], gap)
    if censored[0]:
        return f"> {times[-1]:g}"
    return "never arrived" if np.isnan(dep[0]) else f"{dep[0]:g}"


def particle_shift(times, until: float, dist_A, mf_departure, gap: float) -> np.ndarray:
    """(replica) departure shift of the particles' curves ``dist_A`` (replica, time) against the mean field's
    departure ``mf_departure`` (``geometric_departure`` on the snapshots up to ``until``, where the reference is
    resolved). Where the reference departed, the particles' whole curves count (one departing an interval after
    the reference's last resolved snapshot is off by that interval). Where it stopped before the horizon without
    departing, the particles are taken up to ``until``: one departed by then is off by inf, one still metastable
    there is NaN, not judged; and where the reference had not even arrived at the metastable phase by then, no
    replica is judged."""
    departed = np.isfinite(np.asarray(mf_departure[0], dtype=float))
    early = until < times[-1]
    resolved = times <= until if early and not np.all(departed) else np.ones(times.size, bool)
    particles = fitting.geometric_departure(times[resolved], dist_A[:, resolved], gap)
    shift = fitting.departure_shift(*particles, *mf_departure)
    if early and not np.all(departed):
        arrived = bool(np.all(mf_departure[1]))  # censored: still metastable at until
        shift = np.where(shift == 0, np.nan, shift) if arrived else np.full(shift.shape, np.nan)
    return shift


def stands_for(shift: np.ndarray, interval: float) -> np.ndarray:
    """(beta, tokens) 1 where every replica's departure shift (…, replica) is within one snapshot ``interval`` of
    the mean field's, 0 where one is not, NaN where none was measured (no reference at that β)."""
    measured = ~np.any(np.isnan(shift), axis=-1)  # departure_shift is never NaN: NaN is "not run"
    within = np.all(shift <= interval * (1 + 1e-9), axis=-1)  # times are rounded: one interval is one
    return np.where(measured, within.astype(float), np.nan)


def regime_table(betas, tokens, stands, shift, horizon=None) -> str:
    """Per β a row, per N a cell: 'yes' where the particles stand for the mean field, else the largest shift of a
    departure (in units of t), '-' where not judged. ``horizon`` (beta,): the time at which the reference is still
    metastable at the horizon, NaN where it departed; there a 'yes' says only that both stayed to that time."""
    horizon = np.full(len(betas), np.nan) if horizon is None else np.asarray(horizon, dtype=float)
    lines = ["| β | " + " | ".join(f"N = {n}" for n in tokens) + " |", "|" + "---|" * (len(tokens) + 1)]
    for i, beta in enumerate(betas):
        yes = "yes" if np.isnan(horizon[i]) else f"yes to t = {horizon[i]:g} (both still metastable)"
        cells = []
        for j in range(len(tokens)):
            worst = float(np.max(shift[i, j]))
            cells.append("-" if np.isnan(stands[i, j]) else yes if stands[i, j] else f"no (off by Δt = {worst:g})")
        lines.append(f"| {beta:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def boundary_summary(betas, tokens, stands, dim: int, horizon=None) -> str:
    """The measured boundary per β (``regimes.measured_boundary``, over the β judged at every N) and its slope in
    (log N, log β) beside the selectivity scaling's 2/(d−1). Where the reference is still metastable at the horizon
    (``horizon`` (beta,) finite, as in ``regime_table``) the particles that stand for it only stayed with it, so the
    boundary there is a lower bound, left out of the slope. A β not judged at every N (not run there, or not
    judged) is named after them: beyond the largest N judged where none of those stands, else not placed."""
    stands = np.asarray(stands, dtype=float)
    judged = ~np.any(np.isnan(stands), axis=1)
    partial = [_partial_boundary(b, tokens, row) for b, row in zip(np.asarray(betas, float)[~judged], stands[~judged])]
    horizon = np.full(len(betas), np.nan) if horizon is None else np.asarray(horizon, dtype=float)
    betas, horizon = np.asarray(betas, dtype=float)[judged], horizon[judged]
    boundary = regimes.measured_boundary(tokens, stands[judged] == 1)
    where = [
        f"β = {b:g}: "
        + (
            f"beyond N = {tokens[-1]}"
            if np.isinf(n)
            else f"not known (every N still metastable with the reference at t = {h:g})"
            if np.isnan(n) and np.isfinite(h)
            else f"below N = {tokens[0]}"
            if np.isnan(n)
            else f"N ≈ {n:.0f}"
            if np.isnan(h)
            else f"N ≈ {n:.0f} or more (the reference is still metastable at t = {h:g})"
        )
        for b, n, h in zip(betas, boundary, horizon)
    ] + partial
    boundary = np.where(np.isfinite(horizon) & np.isfinite(boundary), np.inf, boundary)  # a lower bound: no point
    slope = regimes.boundary_slope(betas, boundary)
    between = boundary[np.isfinite(boundary)]
    if between.size < 2:
        measured = "not measured (fewer than two β with it between two measured N where the reference departed)"
    elif np.isnan(slope):  # every finite point at the same N
        measured = "not resolved (it lies between the same two measured N at every β where it is measured)"
    else:
        measured = f"{slope:.2f}"
    return (
        f"Measured boundary: {'; '.join(where) or 'none (no β judged)'}. Slope of log β against log N along it: "
        f"{measured}; the selectivity scaling's: {2 / (dim - 1):g}."
    )


def _partial_boundary(beta: float, tokens, row) -> str:
    """Where the boundary lies at a β not judged at every N (``row`` (tokens,) NaN there): beyond the largest N
    judged where none of the judged N stands for the mean field (a lower bound), else not placed."""
    seen = np.flatnonzero(~np.isnan(row))
    if seen.size and not np.any(row[seen] == 1):
        return f"β = {beta:g}: beyond N = {tokens[seen[-1]]} (not judged at larger N)"
    return f"β = {beta:g}: not placed (not judged at every N)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--experiment", help="a d = 2 experiment of the config (default: its first)")
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--betas", type=float, nargs="+", help="a subset of the experiment's β (default: all)")
    ap.add_argument("--width", type=float, default=0.05, help="the reference's initial cell width (radians)")
    ap.add_argument(
        "--depth", type=float, default=0.001, help="its cells graded towards E1(A)⊥ down to this width (radians)"
    )
    ap.add_argument("--w2-every", type=int, default=4, help="particle error at every k-th snapshot")
    ap.add_argument("--horizon", type=float, help="stop here (rounded to a snapshot; default: the experiment's)")
    ap.add_argument("--figure", help="write the (log N, log β) picture of where particles stand for the mean field")
    ap.add_argument("--out", default="results/bench/mean_field_departure.nc")
    ap.add_argument("--markdown", help="write the summary here (e.g. docs/mean_field_departure.md)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    start = time.time()
    commit = harness.commit()  # the code that runs: read before the (long) run

    config = schema.load_config_file(str(args.config))
    validation.validate_config(config, SCHEMA, configfiles=[args.config])  # fills in the schema's defaults
    name = args.experiment or next(iter(config["experiments"]))
    exp, root_seed = config["experiments"][name], int(config["root_seed"])
    if exp["dim"] != 2:
        raise SystemExit(f"{name}: the circle's reference needs dim = 2, got {exp['dim']}")
    if exp["initial_measure"]["name"] != "uniform":
        raise SystemExit(
            f"{name}: this study draws uniform tokens; the experiment's measure is {exp['initial_measure']['name']!r}"
        )
    M = build_matrices(name, exp, root_seed)  # what the matrices stage writes
    red = reduction.reduce(M.B, M.V)
    grid = integrate.TimeGrid(exp["time"]["horizon"], exp["time"]["snapshots"], exp["time"]["dt"])
    interval = grid.horizon / grid.snapshots
    if args.horizon is not None:
        if not 0 < args.horizon <= grid.horizon:
            raise SystemExit(f"--horizon must lie in (0, {grid.horizon:g}], got {args.horizon:g}")
        snapshots = max(1, int(round(args.horizon / interval)))
        grid = integrate.TimeGrid(snapshots * interval, snapshots, grid.dt)
    times = grid.times
    gap = fitting.subspace_gap(M.E1, M.E1_V_real)
    betas = [float(b) for b in exp["betas"]]
    if args.betas:
        unknown = sorted(set(args.betas) - set(betas))
        if unknown:
            raise SystemExit(f"--betas {unknown} are not β of {name} ({betas})")
        betas = [b for b in betas if b in set(args.betas)]
    tokens = sorted(set(args.tokens))
    w2_at = np.arange(0, times.size, args.w2_every)

    mf_dist = np.full((len(betas), times.size), np.nan)
    p_dist = np.full((len(betas), len(tokens), args.replicas, times.size), np.nan)
    p_err = np.full((len(betas), len(tokens), args.replicas, w2_at.size), np.nan)
    p_shift = np.full((len(betas), len(tokens), args.replicas), np.nan)
    still = np.full(len(betas), np.nan)  # where the reference is still metastable at its last resolved time
    mf_seconds = np.zeros(len(betas))
    rows = []
    for i, beta in enumerate(betas):
        t0 = time.time()
        try:
            sol = meanfield.solve(
                red,
                beta,
                times,
                width=args.width,
                depth=args.depth,
                rtol=1e-8,
                atol=1e-13,
                truncate=True,
                progress=lambda t, info, b=beta: LOG.info("beta %g: mean field at t = %g (%s)", b, t, info),
            )
        except (RuntimeError, FloatingPointError) as exc:  # the reference's limit (docs/mean_field.md, "Limits")
            LOG.warning("beta %g: no mean-field reference: %s", beta, exc)
            rows.append(
                {
                    "beta": beta,
                    "mf": f"not computed ({str(exc)[:120]})",
                    "cells": "-",
                    "until": np.nan,
                    **{f"N={n}": "-" for n in tokens},
                    **{f"err{n}": np.nan for n in tokens},
                }
            )
            continue
        mf_seconds[i] = time.time() - t0
        mf_dist[i] = sol.distance_to_eigenspace(M.E1)
        LOG.info("beta %g: mean field in %.0f s (%s)", beta, mf_seconds[i], sol.info)
        until = sol.info["resolved_until"]
        resolved = times <= until
        mf_dep = fitting.geometric_departure(times[resolved], mf_dist[i][resolved], gap)
        still[i] = until if bool(mf_dep[1]) else np.nan
        row = {
            "beta": beta,
            "mf": departure(times[resolved], mf_dist[i][resolved], gap),
            "cells": sol.info["cells"],
            "until": until,
        }
        for j, n in enumerate(tokens):
            X0 = measures.uniform(
                seeding.generator(root_seed, name, "mean_field_departure", str(n)), args.replicas, n, 2
            )
            X = integrate.simulate(lambda Y, b=beta: kernels.dense_field(Y, M.B, M.V, b), X0, grid)
            P = sol.push_forward(X0)
            p_dist[i, j] = projection.distance_to_eigenspace(X, M.E1)  # (replica, time)
            for r in range(args.replicas):  # up to the reference's last resolved time (NaN beyond)
                p_err[i, j, r] = [transport.w2(X[r, k], P[r, k]) if times[k] <= until else np.nan for k in w2_at]
            deps = [departure(times, p_dist[i, j, r], gap) for r in range(args.replicas)]
            p_shift[i, j] = particle_shift(times, until, p_dist[i, j], mf_dep, gap)
            row[f"N={n}"] = ", ".join(deps)
            row[f"err{n}"] = float(np.nanmax(p_err[i, j]))
            LOG.info("beta %g N %d: departures %s, largest particle error %.3g", beta, n, deps, row[f"err{n}"])
        rows.append(row)

    ds = xr.Dataset(
        {
            "mf_dist_leading_A": (("beta", "time"), mf_dist),
            "mf_seconds": (("beta",), mf_seconds),
            "particle_dist_leading_A": (("beta", "tokens", "replica", "time"), p_dist),
            "particle_error_w2": (("beta", "tokens", "replica", "w2_time"), p_err),
            "departure_shift": (("beta", "tokens", "replica"), p_shift),
            "stands_for_mean_field": (("beta", "tokens"), stands_for(p_shift, interval)),
        },
        coords={
            "beta": betas,
            "tokens": tokens,
            "replica": np.arange(args.replicas),
            "time": times,
            "w2_time": times[w2_at],
        },
        attrs={
            "experiment": name,
            "end_phase_gap": gap,
            "snapshot_interval": interval,
            "description": "mean-field reference on the circle against particles: distance to E1(A) and "
            "W2 between particles and the reference's push-forward of the same tokens",
        },
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    netcdf.write_netcdf(ds, args.out, "bench", netcdf.provenance(name, exp, root_seed))
    wall = time.time() - start
    header = [
        "β",
        "mean field departs at",
        *[f"particles N = {n} (per replica)" for n in tokens],
        *[f"max W2 particles–reference, N = {n}" for n in tokens],
        "reference resolved to t =",
        "cells (last)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{row['beta']:g}",
                    row["mf"],
                    *[row[f"N={n}"] for n in tokens],
                    *[f"{row[f'err{n}']:.3g}" for n in tokens],
                    f"{row['until']:g}",
                    str(row["cells"]),
                ]
            )
            + " |"
        )
    table = "\n".join(lines)
    stands = ds["stands_for_mean_field"].values
    regime = (
        regime_table(betas, tokens, stands, p_shift, still) + "\n\n" + boundary_summary(betas, tokens, stands, 2, still)
    )
    print(table + "\n\n" + regime)
    if args.figure:
        error = np.nanmax(p_err, axis=(2, 3), initial=-np.inf)
        fig = regimes.plot_particle_regime(
            betas, tokens, stands, np.where(np.isinf(error), np.nan, error), 2, horizon=still
        )
        Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.figure, dpi=130)
    if args.markdown:
        command = (
            f"python {harness.script(__file__)} {args.config} --experiment {name} --tokens "
            f"{' '.join(map(str, tokens))} --replicas {args.replicas} --w2-every {args.w2_every}"
            f"{' --betas ' + ' '.join(f'{b:g}' for b in betas) if args.betas else ''}"
            f"{f' --horizon {args.horizon:g}' if args.horizon is not None else ''}"
            f"{f' --width {args.width:g}' if args.width != 0.05 else ''}"
            f"{f' --depth {args.depth:g}' if args.depth != 0.001 else ''}"
        )
        text = (
            f"# Mean-field departure on the circle (generated)\n\n"
            f"{harness.stamp(command, 'mean-field-departure', revision=commit, seconds=wall)}\n\n"
            f"Experiment `{name}` of `{args.config}`: d = 2, horizon {times[-1]:g}, snapshot every "
            f"{times[1] - times[0]:g}; departure = the first time, after reaching E1(A), that the distance to "
            f"E1(A) exceeds half the distance between E1(A) and V's leading eigenspace ({gap / 2:.3f}); "
            f"'> T': still metastable at time T (the horizon, or for the mean field the last time its cells "
            f'are resolved in float64, docs/mean_field.md, "Limits"). '
            f"The particle error is W2 between the particle cloud and "
            f"the reference's push-forward of the same initial tokens, largest over replicas and over every "
            f"{args.w2_every}-th snapshot up to the reference's last resolved time. The reference: cells "
            f"of width {args.width:g} graded to {args.depth:g} towards E1(A)⊥ (those of the default run's "
            f"`mean_field_circle`), DOP853 at rtol 1e-8. Method: docs/mean_field.md.\n\n{table}\n\n"
            f"Where the particles stand for the mean field: every replica departs within one snapshot interval "
            f"({interval:g}) of it, compared on the snapshots the reference resolves (`fitting.departure_shift`: "
            f"'off by Δt = inf' where one departed and the other did not; '-': not judged, where the reference "
            f"stopped before the horizon still metastable and the particles were too).\n\n{regime}\n"
            + (
                f"\n![where particles stand for the mean field]"
                f"({os.path.relpath(args.figure, Path(args.markdown).parent)})\n"
                if args.figure
                else ""
            )
        )
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
