"""The default run's exact-W2 cloud pairs at any particle number: the concentration experiment simulated by the
pipeline's own stages (same matrices, root seed and integrator; one replica) at inverse temperature β and at
zero temperature, written as finite_temperature/beta<β>.nc and zero_temperature.nc under OUT/N<tokens>/.

`benchmarks/bench_w2.py --snapshots` then compares the W2 solvers on them (`make w2-snapshots`). At the
configured ``tokens`` and a uniform ρ0 (the default concentration experiment), replica 0 of this one-replica
run starts from the tokens of the configured run's replica 0 (the sampler fills replica 0 first).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from lowtemp.config import schema, validation
from lowtemp.stages import initial_tokens, matrices, simulate
from lowtemp.store.harness import SCHEMA


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--experiment", default="concentration")
    ap.add_argument("--beta", type=float, default=100.0)
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--out", default="results/bench/w2_snapshots")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    config = schema.load_config_file(args.config)
    out = Path(args.out)
    validation.validate_config(config, SCHEMA, configfiles=[args.config], results=str(out / "results"))
    if args.experiment not in config["experiments"]:
        raise SystemExit(f"--experiment {args.experiment!r} is not in {args.config}")
    base = config["experiments"][args.experiment]
    if args.beta not in [float(b) for b in base["betas"]]:
        raise SystemExit(f"--beta {args.beta:g} is not among experiments.{args.experiment}.betas {base['betas']}")
    if any(n < 2 for n in args.tokens):
        raise SystemExit(f"--tokens must be at least 2, got {args.tokens}")
    root = config["root_seed"]
    for n in args.tokens:
        work = out / f"N{n}"
        work.mkdir(parents=True, exist_ok=True)
        exp = dict(base, tokens=n, replicas=1)
        matrices.stage_matrices(args.experiment, exp, root, work / "matrices.nc")
        initial_tokens.stage_initial_tokens(args.experiment, exp, root, work / "matrices.nc", work / "tokens.nc")
        inputs = (work / "matrices.nc", work / "tokens.nc")
        simulate.stage_zero_temperature(args.experiment, exp, root, *inputs, work / "zero_temperature.nc")
        simulate.stage_finite_temperature(
            args.experiment, exp, root, args.beta, *inputs, work / f"beta{args.beta:g}.nc"
        )
        print(f"wrote {work}/beta{args.beta:g}.nc and zero_temperature.nc", flush=True)


if __name__ == "__main__":
    main()
