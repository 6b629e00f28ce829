# Resource requests and job groups of every rule, from the experiment's config
# (lowtemp.config.resources: memory, wall time and CPUs from N, d, R, snapshots, the
# time grid and the kernel). Used by any executor; the SLURM profile
# (workflow/profiles/slurm) turns them into sbatch --mem, -t and --cpus-per-task.
# Included after common.smk (EXPERIMENTS, BETAS, ROOT_SEED, MATRICES, lowtemp_resources), before the rules.
from lowtemp.config import registry as lowtemp_registry

# K, Q, V of each experiment, as checked by common.smk: the automatic kernel rule
# needs σmin(B), so the estimate uses the kernel the job will use.
_RESOURCE_MATRICES = MATRICES


def _resource_estimate(stage, wildcards, threads=1, attempt=1):
    label = getattr(wildcards, "beta", None)
    beta = None if label is None else BETAS[wildcards.experiment][label]
    return lowtemp_resources.estimate(
        stage,
        EXPERIMENTS[wildcards.experiment],
        beta=beta,
        matrices=_RESOURCE_MATRICES[wildcards.experiment],
        threads=threads,
        attempt=attempt,
    )


def stage_mem_mb(stage):
    """``mem_mb`` of a rule's jobs (grows with ``attempt`` on retries)."""

    def mem_mb(wildcards, threads, attempt):
        return _resource_estimate(stage, wildcards, threads, attempt).mem_mb

    return mem_mb


def stage_runtime(stage):
    """``runtime`` (minutes) of a rule's jobs (grows with ``attempt`` on retries)."""

    def runtime(wildcards, threads, attempt):
        return _resource_estimate(stage, wildcards, threads, attempt).runtime_min

    return runtime


def stage_cpus(stage):
    """``cpus_per_task`` of a rule's jobs: the rule's threads (finite temperature) or 1."""

    def cpus_per_task(wildcards, threads):
        return _resource_estimate(stage, wildcards, threads).cpus

    return cpus_per_task


def stage_gpus(stage):
    """``gpu`` of a rule's jobs: 1 where the field runs on PyTorch (``kernel: torch``), else 0 (the SLURM
    plugin then asks for no GPU)."""

    def gpu(wildcards):
        return lowtemp_resources.gpus(stage, EXPERIMENTS[wildcards.experiment])

    return gpu


def stage_group(stage):
    """Job group of a rule's jobs on a cluster: short jobs of one experiment go as one job."""

    def group(wildcards):
        return lowtemp_resources.group_of(stage, EXPERIMENTS[wildcards.experiment])

    return group


def stage_threads(stage):
    """``threads`` of a rule, from the stage registry (``lowtemp.config.registry``)."""
    return lowtemp_registry.stage(stage).threads
