"""Snakemake adapter: rule particle_error_beta -> lowtemp.stages.distances.stage_particle_error_beta."""

from lowtemp.dynamics import kernels
from lowtemp.stages import distances, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
kernels.set_threads(sm.threads)
with joblog.logged(sm.log[0]):
    distances.stage_particle_error_beta(
        p["name"],
        p["experiment"],
        p["root_seed"],
        matrices_path=sm.input.matrices,
        tokens_path=sm.input.tokens,
        finite_path=sm.input.finite,
        output=sm.output[0],
        checkpoint_prefix=sm.params.checkpoints,
        checkpoint_every=sm.config["checkpoint_every_seconds"],
    )
