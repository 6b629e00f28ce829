"""Snakemake adapter: rule zero_temperature -> lowtemp.stages.simulate.stage_zero_temperature."""

from lowtemp.stages import joblog, simulate

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    simulate.stage_zero_temperature(
        p["name"],
        p["experiment"],
        p["root_seed"],
        matrices_path=sm.input.matrices,
        tokens_path=sm.input.tokens,
        output=sm.output[0],
        checkpoint_path=sm.params.checkpoint,
        checkpoint_every=sm.config["checkpoint_every_seconds"],
    )
