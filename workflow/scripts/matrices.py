"""Snakemake adapter: rule matrices -> lowtemp.stages.matrices.stage_matrices."""

from lowtemp.stages import joblog, matrices

p = snakemake.params.stage  # noqa: F821 (injected by Snakemake)
with joblog.logged(snakemake.log[0]):  # noqa: F821
    matrices.stage_matrices(p["name"], p["experiment"], p["root_seed"], output=snakemake.output[0])  # noqa: F821
