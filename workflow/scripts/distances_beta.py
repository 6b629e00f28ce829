"""Snakemake adapter: rule distances_beta -> lowtemp.stages.distances.stage_distances_beta."""

from lowtemp.stages import distances, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    distances.stage_distances_beta(
        p["name"],
        p["experiment"],
        p["root_seed"],
        matrices_path=sm.input.matrices,
        tokens_path=sm.input.tokens,
        finite_path=sm.input.finite,
        zero_path=sm.input.zero,
        output=sm.output[0],
        checkpoint_path=sm.params.checkpoint,
    )
