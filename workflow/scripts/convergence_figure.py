"""Snakemake adapter: rule convergence_figure -> lowtemp.stages.figures.stage_convergence_figure."""

from lowtemp.stages import figures, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    figures.stage_convergence_figure(
        p["name"], p["experiment"], convergence_path=sm.input.convergence, pdf=sm.output.pdf, png=sm.output.png
    )
