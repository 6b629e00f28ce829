"""Snakemake adapter: rule claims_summary -> lowtemp.stages.fit.stage_claims_summary (generated from claims.nc)."""

from lowtemp.stages import fit, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
with joblog.logged(sm.log[0]):
    fit.stage_claims_summary(dict(zip(sm.params.experiments, sm.input)), sm.output[0])
