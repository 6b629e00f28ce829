"""Snakemake adapter: rule claims -> lowtemp.stages.fit.stage_claims."""

from lowtemp.stages import fit, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    fit.stage_claims(
        p["name"],
        p["experiment"],
        p["root_seed"],
        distances_path=sm.input.distances,
        fit_path=sm.input.fit,
        output=sm.output[0],
    )
