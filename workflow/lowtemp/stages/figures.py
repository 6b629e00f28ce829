"""Stages of the figures, the convergence figure and the animation: read the NetCDF files, call the drawing
(``lowtemp.plotting``), write PDF, PNG and GIF atomically. They never recompute physics."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from ..config import plan  # noqa: E402
from ..plotting import animation, convergence, figures  # noqa: E402
from ..store import netcdf  # noqa: E402


def _save_atomic(fig, path):
    path = Path(path)
    with netcdf.atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip("."), dpi=150, bbox_inches="tight")


def stage_figure(
    figure,
    name,
    experiment,
    *,
    matrices_path,
    distances_path,
    fit_path,
    zero_path,
    finite_paths,
    pdf,
    png,
    particles_path=None,
):
    """Draw the named figure of one experiment from its NetCDF files, save PDF and PNG. ``particles_path``: the
    particle runs beside a mean-field reference (particle_error.nc), which the figure w2_projection draws."""
    try:
        plot = figures.FIGURES[figure]
    except KeyError:
        raise ValueError(f"unknown figure {figure!r}; known: {sorted(figures.FIGURES)}") from None
    sns.set_theme(style="ticks", context="paper")
    data = {
        "matrices": netcdf.read_netcdf(matrices_path, "matrices"),
        "distances": netcdf.read_netcdf(distances_path, "distances"),
        "fit": netcdf.read_netcdf(fit_path, "fit"),
    }
    if figure in plan.SPHERE_FIGURES:  # drawn from the positions themselves
        data["zero"] = netcdf.read_netcdf(zero_path, "zero_temperature")
        data["finite"] = [netcdf.read_netcdf(p, "finite_temperature") for p in finite_paths]
    if particles_path is not None:
        data["particles"] = netcdf.read_netcdf(particles_path, "particle_error")
    fig = plot(data, experiment)
    try:
        _save_atomic(fig, pdf)
        _save_atomic(fig, png)
    finally:
        plt.close(fig)


def stage_convergence_figure(name, experiment, *, convergence_path, pdf, png):
    """Draw the convergence figure of one experiment from its convergence.nc, save PDF and PNG."""
    sns.set_theme(style="ticks", context="paper")
    fig = convergence.plot_convergence(netcdf.read_netcdf(convergence_path, "convergence"), experiment)
    try:
        _save_atomic(fig, pdf)
        _save_atomic(fig, png)
    finally:
        plt.close(fig)


def stage_animation(name, experiment, *, zero_path, finite_paths, gif):
    """The animation of one experiment's tokens (``figures/tokens.gif``) from its finite_temperature/beta<β>.nc
    and zero_temperature.nc: replica 0 at ``experiment.animation_frames`` of the snapshots, one panel per β and
    one at zero temperature, on S¹ the circle and on S² an orthographic view. Reads no config key."""
    zero = netcdf.read_netcdf(zero_path, "zero_temperature")
    finite = [netcdf.read_netcdf(p, "finite_temperature") for p in finite_paths]
    animation.write_animation(animation.animation_panels(zero, finite), gif, experiment_name=name)
