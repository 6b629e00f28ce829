"""Benchmark of the integrators on a default experiment's own dynamics (run with `make bench`).

For each β: the experiment's matrices and fresh tokens from its ρ0 (stream
``(name, "bench_integrators", str(N))``), integrated to the horizon on its snapshot
grid by every integrator: the fixed-step ``rk4`` and ``euler`` at ``time.dt``, and
the adaptive ``dopri5`` and ``bs3`` at the default tolerance 10⁻³/√N and at ten
times it. Each run is compared with a reference run (``rk4`` at dt/``--refine``)
by the largest error over snapshots of W2(ρ^β_t, Π♯ρ0) (the pipeline's main curve,
``lowtemp.transport.w2.w2_to_projection``, max over replicas) and by the root mean square
position error (token by token, max over replicas and snapshots). Reported: field
evaluations, accepted and rejected steps, wall time, and their ratios against
``rk4`` in the same process. Prints a table, writes ``--out`` (NetCDF) and, with
``--markdown``, the table as a Markdown file.

Read the ratios, not the absolute times: the machine is shared. Where the
dynamics is chaotic (the departure at large β) the position error of every
integrator, ``rk4`` included, is the amplified rounding and truncation of a
trajectory that no integrator follows for long; the W2 error is what the
pipeline's numbers inherit.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import xarray as xr

from lowtemp.config import experiment, schema
from lowtemp.dynamics import integrate, kernels
from lowtemp.model import measures
from lowtemp.model.seeding import generator
from lowtemp.stages import convergence
from lowtemp.store import harness, netcdf

#: (integrator, tolerance relative to the default) of every run; None: fixed step
RUNS = (("rk4", None), ("euler", None), ("dopri5", 1.0), ("dopri5", 10.0), ("bs3", 1.0), ("bs3", 10.0))


def run_one(field, X0, grid, method, tolerance):
    start = time.perf_counter()
    positions, record = integrate.simulate(field, X0, grid, method, tolerance=tolerance, return_record=True)
    return positions, record, time.perf_counter() - start


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--experiment", default="concentration")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--betas", type=float, nargs="+", default=[10.0, 100.0, 1000.0])
    ap.add_argument("--refine", type=int, default=8, help="the reference's step is time.dt / refine (rk4)")
    ap.add_argument("--out", default="results/bench/integrators.nc")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args(argv)

    cfg = schema.load_config_file(args.config)
    schema.check_schema(cfg, "workflow/schemas/config.schema.yaml")
    exp = cfg["experiments"][args.experiment]
    M = experiment.build_matrices(args.experiment, exp, cfg["root_seed"])
    measure, params = experiment.initial_measure(args.experiment, exp, cfg["root_seed"])
    rng = generator(cfg["root_seed"], args.experiment, "bench_integrators", str(args.tokens))
    X0 = measures.sample_initial_tokens(measure, rng, args.replicas, args.tokens, int(exp["dim"]), **params)
    grid = experiment.time_grid(exp)
    fine = integrate.TimeGrid(grid.horizon, grid.snapshots, grid.step / args.refine)
    tol0 = integrate.default_tolerance(args.tokens)
    names = [m if t is None else f"{m} tol x{t:g}" for m, t in RUNS]
    fields = ("evaluations", "accepted", "rejected", "seconds", "w2_error", "position_error")
    table = {f: np.full((len(args.betas), len(RUNS)), np.nan) for f in fields}
    lines = [
        f"# Integrators on `{args.experiment}` (N = {args.tokens}, {args.replicas} replicas, horizon "
        f"{grid.horizon:g}, {grid.snapshots} snapshots, dt = {grid.step:g}; reference rk4 at dt/{args.refine}; "
        f"default tolerance 1e-3/sqrt(N) = {tol0:.3g})",
        "",
        harness.stamp(harness.command(__file__, sys.argv[1:] if argv is None else argv), "bench"),
        "",
        "| beta | integrator | evaluations | vs rk4 | steps (rejected) | wall time vs rk4 | max W2 error | "
        "max rms position error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for b, beta in enumerate(args.betas):
        field = lambda X, beta=beta: kernels.field_with_kernel(X, M.B, M.V, beta, "dense")  # noqa: E731
        ref, _, _ = run_one(field, X0, fine, "rk4", None)
        w2_ref = convergence.w2_to_projection_curves(ref, X0, M.E1)
        for j, (method, factor) in enumerate(RUNS):
            P, record, seconds = run_one(field, X0, grid, method, None if factor is None else factor * tol0)
            w2 = convergence.w2_to_projection_curves(P, X0, M.E1)
            values = (
                record.evaluations.sum(),
                record.accepted.sum(),
                record.rejected.sum(),
                seconds,
                np.max(np.abs(w2 - w2_ref)),
                np.max(np.sqrt(np.mean(np.sum((P - ref) ** 2, -1), -1))),
            )
            for f, v in zip(fields, values):
                table[f][b, j] = v
        for j, name in enumerate(names):
            row = {f: table[f][b, j] for f in fields}
            lines.append(
                f"| {beta:g} | {name} | {row['evaluations']:.0f} | "
                f"{row['evaluations'] / table['evaluations'][b, 0]:.2f} | {row['accepted']:.0f} "
                f"({row['rejected']:.0f}) | {row['seconds'] / table['seconds'][b, 0]:.2f} | "
                f"{row['w2_error']:.2e} | {row['position_error']:.2e} |"
            )
        print("\n".join(lines[-len(names) :]), flush=True)
    ds = xr.Dataset({f: (("beta", "run"), table[f]) for f in fields}, coords={"beta": args.betas, "run": names})
    ds.attrs.update(
        experiment=args.experiment,
        tokens=args.tokens,
        replicas=args.replicas,
        refine=args.refine,
        default_tolerance=tol0,
        cpu=netcdf.cpu_name(),
    )
    netcdf.write_netcdf(ds, args.out, "bench", netcdf.provenance(args.experiment, exp, cfg["root_seed"]))
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
