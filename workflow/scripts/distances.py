"""Snakemake adapter: rule distances -> lowtemp.pipeline.stage_collect_distances."""
from lowtemp import joblog, pipeline

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    pipeline.stage_collect_distances(p["name"], p["experiment"], p["root_seed"], matrices_path=sm.input.matrices,
                                     tokens_path=sm.input.tokens, zero_path=sm.input.zero,
                                     parts=list(sm.input.parts), output=sm.output[0])
