"""Snakemake adapter: rule distances -> lowtemp.stages.distances.stage_distances."""

from lowtemp.stages import distances, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    distances.stage_distances(
        p["name"],
        p["experiment"],
        p["root_seed"],
        matrices_path=sm.input.matrices,
        tokens_path=sm.input.tokens,
        zero_path=sm.input.zero,
        parts=list(sm.input.parts),
        output=sm.output[0],
    )
