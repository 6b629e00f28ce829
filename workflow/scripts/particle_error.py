"""Snakemake adapter: rule particle_error -> lowtemp.stages.distances.stage_particle_error."""

from lowtemp.stages import distances, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    distances.stage_particle_error(
        p["name"],
        p["experiment"],
        p["root_seed"],
        parts=list(sm.input.parts),
        output=sm.output[0],
    )
