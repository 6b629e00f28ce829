"""The time-scale figure draws the slope the ``metastable_log_beta`` claim reports: the middle of its bounds where
they are two-sided, its lower bound where a censored β leaves it unbounded above, none where there is no lower
bound."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

from lowtemp.plotting import figures  # noqa: E402

BETAS = np.array([10.0, 31.6, 100.0, 1000.0])


def _data(censored_last: bool, slope, interval):
    """A fit with three departed β and a fourth departed or censored, three replicas, the slope bounds given."""
    dep = np.array([[4.25] * 3, [6.5, 6.25, 6.5], [13.5] * 3, [19.0] * 3])
    censored = np.zeros(dep.shape, bool)
    if censored_last:
        dep[-1], censored[-1] = np.nan, True
    fit = xr.Dataset(
        {
            "departure_time": (("beta", "replica"), dep),
            "departure_censored": (("beta", "replica"), censored),
            "metastable_beta_used": ("beta", np.ones(4, bool)),
            "metastable_slope": (("replica", "bound"), np.array(slope, float)),
            "metastable_slope_interval": ("bound", np.array(interval, float)),
        },
        coords={"beta": BETAS},
    )
    distances = xr.Dataset(coords={"time": np.linspace(0.0, 14.0, 57)})
    return {"fit": fit, "distances": distances}


def _slope_line(data):
    """(slope, label, the line's (x, y) at its ends) of the dashed line the figure draws; slope None where it draws
    none."""
    fig = figures.plot_time_scale(data, {})
    try:
        (line,) = [ln for ln in fig.axes[0].lines if ln.get_linestyle() == "--"]
        x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
        slope = None if len(x) < 2 else float((y[-1] - y[0]) / (x[-1] - x[0]))
        return slope, line.get_label(), (x[[0, -1]], y[[0, -1]]) if len(x) else None
    finally:
        plt.close(fig)


def test_a_censored_beta_draws_the_lower_bound_of_the_slope():
    """Censored β = 1000 (the slope bounded below only): the line has the interval's lower bound as its slope and
    says so, and runs through the centroid of the judged β with the censored one at the horizon, where the bound
    comes from; before, the figure drew no line and said the slope was unbounded."""
    slope, label, (x, y) = _slope_line(_data(True, [[2.17, np.inf], [2.19, np.inf], [2.17, np.inf]], [2.159, np.inf]))
    assert slope == pytest.approx(2.159)
    assert "[2.16, inf]" in label and "lower bound" in label
    centroid = (np.mean(np.log(BETAS)), np.mean([4.25, np.mean([6.5, 6.25, 6.5]), 13.5, 14.0]))
    assert x[-1] == pytest.approx(np.log(1000.0))
    assert y[0] + slope * (centroid[0] - x[0]) == pytest.approx(centroid[1])


def test_two_sided_bounds_draw_their_middle():
    """Every β departed: the slope drawn is the mean of the replicas' bounds, and nothing is said of a lower bound."""
    bounds = [[2.0, 3.0], [2.2, 3.2], [2.1, 3.1]]
    slope, label, _ = _slope_line(_data(False, bounds, [2.0, 3.2]))
    assert slope == pytest.approx(np.mean(bounds))
    assert "lower bound" not in label


def test_no_lower_bound_draws_no_slope():
    """Bounds NaN (fewer than two judged β): no line, and the legend says why."""
    slope, label, _ = _slope_line(_data(True, [[np.nan, np.nan]] * 3, [np.nan, np.nan]))
    assert slope is None and label.startswith("no slope")
