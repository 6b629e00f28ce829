"""Snakemake adapter: rule finite_temperature -> lowtemp.stages.simulate.stage_finite_temperature."""

from lowtemp.dynamics import kernels
from lowtemp.stages import joblog, simulate

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
kernels.set_threads(sm.threads)
with joblog.logged(sm.log[0]):
    simulate.stage_finite_temperature(
        p["name"],
        p["experiment"],
        p["root_seed"],
        beta=sm.params.beta,
        matrices_path=sm.input.matrices,
        tokens_path=sm.input.tokens,
        output=sm.output[0],
        checkpoint_path=sm.params.checkpoint,
        checkpoint_every=sm.config["checkpoint_every_seconds"],
    )
