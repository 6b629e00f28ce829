"""How the softmax's effective sample size grows with N at one β: the premise of a paper-scale run.

The paper-scale run picks N so that the median effective sample size (ESS) of the
attention weights over the metastable window reaches a target, on the premise that the
ESS grows like N. This script tests the premise before anyone pays for the run: it runs the
particle-number study of an experiment (``lowtemp.stages.convergence``: the same initial tokens
per N, the same field, step and kernel rule as the pipeline) at several N, over a shorter
horizon if asked, and prints per N the median ESS (over tokens, then its smallest value over
replicas) at the start, its minimum over the window and when, and the particle-number
budget at the largest N (``particle_budget.study_budget``: the bound on the remaining N error
of W2(ρ^β_t, Π_# ρ0) relative to W2 before the earliest departure, and the departure time's
slope per doubling of N).

    python studies/ess_scaling.py config/paper_scale.yaml --tokens 2048 4096 8192 16384 --horizon 14

Writes results/bench/ess_scaling.nc (``--out``) with the ESS and W2 curves per N.
"""

from __future__ import annotations

import argparse
import copy
import functools
import logging
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

from lowtemp.analysis import particle_budget
from lowtemp.config import schema, studies, validation
from lowtemp.config.experiment import build_matrices
from lowtemp.stages import convergence
from lowtemp.store import netcdf
from lowtemp.store.harness import SCHEMA


def study_experiment(experiment: dict, beta: float, tokens: list[int], replicas: int, horizon: float | None) -> dict:
    """The experiment with its particle-number study set to these N, replicas and horizon (nothing else changed)."""
    exp = copy.deepcopy(experiment)
    conv = exp["convergence"] = dict(exp.get("convergence") or {})
    conv["beta"] = float(beta)
    conv["particles"] = {"tokens": list(tokens), "replicas": int(replicas)}
    if horizon is not None:
        conv["particles"]["horizon"] = float(horizon)
    return exp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--experiment", help="experiment name (default: the config's only or first experiment)")
    ap.add_argument("--beta", type=float, default=1000.0)
    ap.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--horizon", type=float, help="horizon of the runs (a snapshot time; default the experiment's)")
    ap.add_argument("--out", default="results/bench/ess_scaling.nc")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)

    config = schema.load_config_file(args.config)
    name = args.experiment or next(iter(config["experiments"]))
    config["experiments"][name] = study_experiment(
        config["experiments"][name], args.beta, args.tokens, args.replicas, args.horizon
    )
    validation.validate_config(config, SCHEMA, configfiles=[args.config])  # fills in the schema's defaults
    experiment, root_seed = config["experiments"][name], int(config["root_seed"])
    S = studies.study_settings(name, experiment)
    start = time.perf_counter()
    M = build_matrices(name, experiment, root_seed)  # what the matrices stage writes
    sample = functools.partial(convergence.particle_tokens, name, experiment, root_seed)
    w2, dist_A, ess, _, grid, kernels = convergence._particle_study(f"{name} ess scaling", S, M, S.beta, sample)
    seconds = time.perf_counter() - start
    worst = ess.min(axis=1)  # (N, time): the smaller replica's median ESS
    print(f"beta = {S.beta:g}, {S.particles.replicas} replicas, horizon {grid.horizon:g}, {seconds:.0f} s")
    print(f"{'N':>7} {'kernel':>7} {'ESS t=0':>8} {'min ESS':>8} {'at t':>6} {'min/N x 1e4':>12}")
    for i, n in enumerate(S.particles.tokens):
        k = int(np.argmin(worst[i]))
        print(
            f"{n:>7} {kernels[i]:>7} {worst[i, 0]:>8.1f} {worst[i, k]:>8.2f} {grid.times[k]:>6.2f} "
            f"{1e4 * worst[i, k] / n:>12.3f}"
        )
    budget = particle_budget.study_budget(S.particles.tokens, w2, dist_A, grid, S.particles.tokens[-1], M)
    lo, hi = budget["departure_slope_per_doubling"]
    print(
        f"budget at N = {S.particles.tokens[-1]}: remaining W2 error <= {budget['w2_budget_ratio']:.3g} x W2 "
        f"(t <= {budget['budget_window_end']:g}); departure per doubling of N in [{lo:.3g}, {hi:.3g}]"
    )
    ds = xr.Dataset(
        {
            "ess_median": (("tokens", "replica", "time"), ess),
            "w2": (("tokens", "replica", "time"), w2),
            "dist_leading_A": (("tokens", "replica", "time"), dist_A),
        },
        coords={"tokens": list(S.particles.tokens), "time": grid.times},
        attrs=dict(beta=S.beta, experiment=name, config=args.config, seconds=seconds, kernels=",".join(kernels)),
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    netcdf.write_netcdf(ds, args.out, "bench", netcdf.provenance(name, experiment, root_seed))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
