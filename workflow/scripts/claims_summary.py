"""Snakemake adapter: rule claims_summary -> lowtemp.claims.summary_markdown (generated from claims.nc)."""
from lowtemp import claims, io, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
with joblog.logged(sm.log[0]):
    text = claims.summary_markdown(dict(zip(sm.params.experiments, sm.input)))
    with io.atomic_path(sm.output[0]) as tmp:
        with open(tmp, "w") as fh:
            fh.write(text)
