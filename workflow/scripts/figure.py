"""Snakemake adapter: rule figure -> lowtemp.stages.figures.stage_figure."""

from lowtemp.stages import figures, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    figures.stage_figure(
        sm.wildcards.figure,
        p["name"],
        p["experiment"],
        matrices_path=sm.input.matrices,
        distances_path=sm.input.distances,
        fit_path=sm.input.fit,
        zero_path=sm.input.zero,
        finite_paths=list(sm.input.finite),
        particles_path=sm.input.get("particles"),
        pdf=sm.output.pdf,
        png=sm.output.png,
    )
