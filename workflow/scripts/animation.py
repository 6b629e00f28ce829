"""Snakemake adapter: rule animation -> lowtemp.stages.figures.stage_animation."""

from lowtemp.stages import figures, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    figures.stage_animation(
        p["name"], p["experiment"], zero_path=sm.input.zero, finite_paths=list(sm.input.finite), gif=sm.output.gif
    )
