"""Benchmark of the mean-field reference solver on the default experiments' own problems (run with `make bench`).

For each ``model: mean_field`` experiment and each β: ``meanfield.solve`` on the experiment's reduction, cells and
snapshot grid, once with the fast softmax rule (windows, local rates, the circle's node table; the default) and
once with the plain rule (every kept cell whole at the rate κ + ζ + 1), in the same process. Reported: field
evaluations, cells at the horizon, wall time of each and their ratio, and how far apart the two solutions put
the same 512 tokens (the largest root mean square distance over snapshots of the two push-forwards, an upper
bound of W2 between them; it should be far below the reference's own error, 1e-4…1e-2 of W2).
Prints a table and, with ``--markdown``, writes it as a Markdown file (docs/mean_field_bench.md).

Read the ratios, not the absolute times: the machine may be shared.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from lowtemp.config import experiment, validation
from lowtemp.dynamics import meanfield, reduction
from lowtemp.model import measures
from lowtemp.model.seeding import generator
from lowtemp.stages.simulate import MEAN_FIELD_ATOL, MEAN_FIELD_RTOL
from lowtemp.store import io


def solve_both(red, beta, times, measure_name, params, width, depth):
    """{fast: (solution, seconds)} for the fast and the plain rule."""
    out = {}
    for fast in (True, False):
        start = time.perf_counter()
        sol = meanfield.solve(
            red,
            beta,
            times,
            measure=measure_name,
            params=params,
            width=width,
            depth=depth,
            rtol=MEAN_FIELD_RTOL,
            atol=MEAN_FIELD_ATOL,
            fast=fast,
        )
        out[fast] = (sol, time.perf_counter() - start)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--experiments", nargs="+", default=None, help="default: every model: mean_field experiment")
    ap.add_argument("--betas", type=float, nargs="+", default=None, help="default: each experiment's betas")
    ap.add_argument("--horizon", type=float, default=None, help="default: each experiment's time.horizon")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args(argv)

    cfg = validation.load_config_file(args.config)
    validation.check_schema(cfg, "workflow/schemas/config.schema.yaml")
    names = args.experiments or [n for n, e in cfg["experiments"].items() if e.get("model") == "mean_field"]
    lines = [
        f"Mean-field solver, fast rule against the plain rule in the same process ({io.cpu_name()}, "
        f"{numba.get_num_threads()} numba threads, commit {io.checkout_commit('.')}, "
        "`python benchmarks/bench_meanfield.py`).",
        "",
        "| experiment | β | cells at the horizon | field evaluations (fast / plain) | seconds (fast / plain) | "
        "plain ÷ fast | largest token distance |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for name in names:
        exp = cfg["experiments"][name]
        if exp.get("model") != "mean_field":
            raise SystemExit(f"bench_meanfield: experiment {name} is not model: mean_field")
        M = experiment.build_matrices(name, exp, cfg["root_seed"])
        measure = dict(exp["initial_measure"])
        measure_name = measure.pop("name")
        red = reduction.reduce(M.B, M.V, measure_name, measure)
        grid = experiment.time_grid(exp)
        times = grid.times if args.horizon is None else grid.times[grid.times <= args.horizon + 1e-12]
        rng = generator(cfg["root_seed"], name, "bench_meanfield")
        X0 = measures.sample_initial_tokens(measure_name, rng, 1, 512, exp["dim"], **measure)
        width, depth = float(exp["mean_field"]["width"]), float(exp["mean_field"]["depth"])
        for beta in args.betas or exp["betas"]:
            runs = solve_both(red, float(beta), times, measure_name, measure, width, depth)
            (fast, t_fast), (plain, t_plain) = runs[True], runs[False]
            gap = np.sqrt(np.mean(np.sum((fast.push_forward(X0) - plain.push_forward(X0)) ** 2, axis=-1), axis=-1))
            line = (
                f"| {name} | {beta:g} | {fast.info['cells']} | {fast.evaluations} / {plain.evaluations} | "
                f"{t_fast:.1f} / {t_plain:.1f} | {t_plain / t_fast:.2f} | {float(np.max(gap)):.1e} |"
            )
            lines.append(line)
            print(line, flush=True)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
