"""Snakemake adapter: rule fit -> lowtemp.stages.fit.stage_fit."""

from lowtemp.stages import fit, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    fit.stage_fit(
        p["name"],
        p["experiment"],
        p["root_seed"],
        matrices_path=sm.input.matrices,
        distances_path=sm.input.distances,
        output=sm.output[0],
        convergence_path=sm.input.get("convergence"),
    )
