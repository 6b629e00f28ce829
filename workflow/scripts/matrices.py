"""Snakemake adapter: rule matrices -> lowtemp.pipeline.stage_matrices."""
from lowtemp import joblog, pipeline

p = snakemake.params.stage  # noqa: F821 (injected by Snakemake)
with joblog.logged(snakemake.log[0]):  # noqa: F821
    pipeline.stage_matrices(p["name"], p["experiment"], p["root_seed"], output=snakemake.output[0])  # noqa: F821
