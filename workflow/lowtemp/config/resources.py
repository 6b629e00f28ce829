"""Resource requests of the pipeline's jobs: memory (MB), wall time (minutes), CPUs, GPUs and job groups.

The SLURM profile (``workflow/profiles/slurm``) sends every job with the ``mem_mb``, ``runtime``,
``cpus_per_task`` and ``gpu`` that these functions compute from the experiment's config, so a bigger sweep
asks for more without anyone editing numbers per experiment. ``workflow/rules/resources.smk`` is the only
caller in the workflow; it never hard-codes a size.

A job's cost (the arrays it holds at its peak, its compute time) comes from its stage's cost function
(``lowtemp.config.costs``, named by ``lowtemp.config.registry``, which documents what each counts); here it
becomes a request:

* memory = ``BASE_MB`` (the interpreter with numpy, scipy, xarray, numba and POT imported and the kernels
  compiled: 224–290 MB peak resident measured on the tiny config; matplotlib/seaborn add ~60 MB, hence
  ``FIGURE_BASE_MB`` for the plotting stages) plus ``MEMORY_MARGIN`` times the counted arrays;
* wall time = ``STARTUP_SECONDS`` plus ``RUNTIME_SAFETY`` times the compute, at least ``RUNTIME_FLOOR_MIN``;
* CPUs: the rule's threads for a stage that runs the numba kernels on them, else 1;
* retries (``attempt`` > 1, e.g. after an out-of-memory kill or a time-out) ask for ``attempt`` times the
  memory and wall time.

Stages that are short (requested wall time at most ``SHORT_JOB_MINUTES``) are the ones the workflow groups
into one SLURM job (``group_of``): the per-β distance jobs with their collection, and the fit, the claims and
the figures.

The package never imports snakemake; these are plain functions of the config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import costs, registry
from .experiment import field_kernel

#: resident memory of a job with the package imported and the kernels compiled (MB)
BASE_MB = 400
#: the same for the figure jobs (matplotlib, seaborn)
FIGURE_BASE_MB = 500
#: multiplies the counted arrays (allocator slack, xarray/h5netcdf buffers)
MEMORY_MARGIN = 1.25
#: job start, imports, the job's own Snakemake DAG, numba compiles (~1.5 s per kernel and process), seconds
STARTUP_SECONDS = 60.0
#: the compute is multiplied by this (``lowtemp.config.costs``: the same step measured 2–3.6× slower beside
#: another job on the same two cores; a job past its wall time is killed)
RUNTIME_SAFETY = 3.0
#: the least wall time asked for (minutes)
RUNTIME_FLOOR_MIN = 10
#: jobs asking for at most this wall time (minutes) may share one cluster job with their group
SHORT_JOB_MINUTES = 15


@dataclass(frozen=True)
class Estimate:
    """Requests of one job and the two numbers they come from."""

    mem_mb: int
    runtime_min: int
    cpus: int
    #: arrays counted at the stage's peak (bytes, before the margin and the base)
    data_bytes: float
    #: compute time before the safety factor and the startup (seconds)
    compute_seconds: float


def gpus(stage: str, experiment: dict) -> int:
    """GPUs a job asks for: 1 for the stages that evaluate the finite-temperature field (``Stage.evaluates_field``) when
    the experiment's kernel is ``torch`` (``lowtemp.dynamics.torch_field``, which runs on a CUDA device when it
    sees one), else 0. The SLURM profile turns 1 into ``--gpus=1``."""
    return int(registry.stage(stage).evaluates_field and field_kernel(experiment) == "torch")


def estimate(
    stage: str, experiment: dict, *, beta: float | None = None, matrices=None, threads: int = 1, attempt: int = 1
) -> Estimate:
    """Memory, wall time and CPUs of one job of ``stage`` for ``experiment`` (a validated
    config entry, schema defaults applied). ``beta`` is needed by ``finite_temperature``;
    ``matrices`` lets ``kernel: auto`` resolve exactly as the job will; ``threads`` are the
    rule's threads; ``attempt`` (1, 2, …) multiplies memory and wall time on retries."""
    spec = registry.stage(stage)
    data, seconds = costs.STAGE_COSTS[stage](experiment, beta=beta, matrices=matrices, threads=threads)
    attempt = max(1, int(attempt))
    base = FIGURE_BASE_MB if spec.plotting else BASE_MB
    mem = base + MEMORY_MARGIN * data / 2**20
    mem_mb = int(math.ceil(mem / 100.0)) * 100 * attempt
    minutes = (STARTUP_SECONDS + RUNTIME_SAFETY * seconds) / 60.0
    runtime = max(RUNTIME_FLOOR_MIN, int(math.ceil(minutes))) * attempt
    cpus = max(1, int(threads)) if spec.threads > 1 else 1
    return Estimate(
        mem_mb=mem_mb, runtime_min=runtime, cpus=cpus, data_bytes=float(data), compute_seconds=float(seconds)
    )


def memory_mb(stage: str, experiment: dict, **kw) -> int:
    """``estimate(stage, experiment, **kw).mem_mb``: the memory request of one job (MB)."""
    return estimate(stage, experiment, **kw).mem_mb


def group_of(stage: str, experiment: dict) -> str | None:
    """Name of the job group ``stage`` joins for ``experiment``, or None (own job).

    A group is one connected piece of the DAG per experiment (the per-β distances
    with their collection; the fit with the claims and the figures), and only when every job of
    it is short (requested wall time ≤ ``SHORT_JOB_MINUTES``): long distance jobs
    (large N, many exact W2 snapshots) keep a SLURM job each so they run in
    parallel on separate allocations.
    """
    group = registry.stage(stage).group
    if group is None:
        return None
    members = [name for name, s in registry.STAGES.items() if s.group == group]
    if all(estimate(s, experiment).runtime_min <= SHORT_JOB_MINUTES for s in members):
        return group
    return None
