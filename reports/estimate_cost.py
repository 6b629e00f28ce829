"""Cost of a config before running it: every job's compute time and memory from the resource model.

``python reports/estimate_cost.py config/paper_scale.yaml [more.yaml ...]`` merges the files
key by key as Snakemake merges ``--configfile`` files, validates the config
(schema, matrices, memory against this machine or ``memory_limit_gb``) and prints, per
job, the compute seconds and memory that ``lowtemp.config.resources`` budgets (the same numbers
the SLURM profile requests, before the safety factor and the start-up time), then the
total CPU hours and the wall time on ``--cores`` cores if the jobs were packed
perfectly. With ``--measured RESULTS`` (a finished run's ``results/`` folder) each row also shows what
the job took (Snakemake's ``benchmarks/<job>.tsv``: wall seconds and peak resident memory; for
``figure`` the slowest of the figure jobs) and measured/estimated. The per-pair field costs and the W2 solve
times it uses are the measured
constants of ``lowtemp.config.costs`` (``make bench`` measures them again); the W2 time is
that of the slower snapshots of the certified network simplex (``lowtemp.config.costs.w2_seconds``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lowtemp.config import registry, resources, schema, validation
from lowtemp.store.harness import SCHEMA, merged


def jobs(config: dict, checked: dict, threads: int):
    """(experiment, job, beta, Estimate) of every job of the config's default target (with the optional stages an
    experiment turns on, ``registry.target_stages``: the particle runs of ``mean_field.particles``, the animation on S¹
    and S²) and studies."""
    for name, exp in config["experiments"].items():
        M = checked[name]
        particles = "particle_error_beta" in registry.target_stages(exp)
        for beta in exp["betas"]:
            yield (
                name,
                "finite_temperature",
                beta,
                resources.estimate("finite_temperature", exp, beta=beta, matrices=M, threads=threads),
            )
            yield name, "distances_beta", beta, resources.estimate("distances_beta", exp)
            if particles:
                yield (
                    name,
                    "particle_error_beta",
                    beta,
                    resources.estimate(
                        "particle_error_beta",
                        exp,
                        beta=beta,
                        matrices=M,
                        threads=min(threads, registry.stage("particle_error_beta").threads),
                    ),
                )
        optional = tuple(s for s in ("particle_error", "animation") if s in registry.target_stages(exp))
        for stage in ("zero_temperature", "distances", "fit", "figure") + optional:
            yield name, stage, None, resources.estimate(stage, exp)
        if "convergence" in exp:
            yield name, "convergence", None, resources.estimate("convergence", exp, matrices=M, threads=threads)


def measured(results: Path, name: str, stage: str, beta) -> tuple[float, float] | None:
    """(wall seconds, peak resident GB) of the job from its Snakemake benchmark file, None if it has none."""
    folder = results / name / "benchmarks"
    per_beta = stage if stage.endswith("_beta") else f"{stage}_beta"  # distances_beta10, finite_temperature_beta10
    pattern = (
        f"{per_beta}{beta:g}.tsv" if beta is not None else (f"{stage}_*.tsv" if stage == "figure" else f"{stage}.tsv")
    )
    rows = []
    for path in sorted(folder.glob(pattern)):
        header, *lines = path.read_text().splitlines()
        cols = dict(zip(header.split("\t"), lines[-1].split("\t")))
        rows.append((float(cols["s"]), float(cols["max_rss"]) / 1024))
    return max(rows) if rows else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="+")
    ap.add_argument("--cores", type=int, default=2, help="cores of the machine (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="threads of the simulation jobs (default 2)")
    ap.add_argument("--measured", type=Path, help="a finished run's results folder: show each job's measured cost")
    args = ap.parse_args(argv)
    config = {}
    for path in args.config:
        config = merged(config, schema.load_config_file(path))
    checked = validation.validate_config(config, SCHEMA, configfiles=args.config)
    rows = list(jobs(config, checked, args.threads))
    extra = f" {'took s':>8} {'/ est':>6} {'RSS GB':>7} {'/ est':>6}" if args.measured else ""
    width = max([16] + [len(name) for name in config["experiments"]])
    print(f"{'experiment':<{width}} {'job':<20} {'beta':>8} {'compute h':>10} {'memory GB':>10} {'cpus':>5}{extra}")
    cpu_seconds = 0.0
    for name, stage, beta, est in rows:
        b = "" if beta is None else f"{beta:g}"
        line = (
            f"{name:<{width}} {stage:<20} {b:>8} {est.compute_seconds / 3600:>10.2f} {est.mem_mb / 1024:>10.1f} "
            f"{est.cpus:>5}"
        )
        took = measured(args.measured, name, stage, beta) if args.measured else None
        if took is not None:
            line += (
                f" {took[0]:>8.0f} {took[0] / max(est.compute_seconds, 1e-9):>6.2f} {took[1]:>7.2f} "
                f"{took[1] / (est.mem_mb / 1024):>6.2f}"
            )
        print(line)
        cpu_seconds += est.compute_seconds * est.cpus
    longest = max(est.compute_seconds for *_, est in rows)
    wall = max(longest, cpu_seconds / args.cores)
    print(
        f"total: {cpu_seconds / 3600:.1f} CPU hours; at least {wall / 3600:.1f} h of wall time on {args.cores} "
        f"cores (longest job {longest / 3600:.1f} h)"
    )
    return rows


if __name__ == "__main__":
    main()
