"""Snakemake adapter: rule convergence_figure -> lowtemp.figures.render_convergence (reads convergence.nc)."""
from lowtemp import figures, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    figures.render_convergence(p["name"], p["experiment"], convergence_path=sm.input.convergence,
                               pdf=sm.output.pdf, png=sm.output.png)
