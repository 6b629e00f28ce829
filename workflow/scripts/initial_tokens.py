"""Snakemake adapter: rule initial_tokens -> lowtemp.pipeline.stage_initial_tokens."""
from lowtemp import joblog, pipeline

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    pipeline.stage_initial_tokens(p["name"], p["experiment"], p["root_seed"],
                                  matrices_path=sm.input.matrices, output=sm.output[0])
