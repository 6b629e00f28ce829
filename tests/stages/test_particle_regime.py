"""Where particles stand for the mean field: the measured boundary, the selectivity line, the study's verdict per
(β, N) from departure shifts, and the picture."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import script_module
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.plotting import regimes

TOKENS = np.array([64, 256, 1024, 4096])


def test_the_boundary_lies_between_the_last_failing_and_the_first_standing_n():
    stands = np.array(
        [
            [True, True, True, True],  # every N: below the smallest
            [False, True, True, True],
            [False, False, False, True],
            [False, False, False, False],  # none: beyond the largest
            [False, True, False, True],  # a failure above a success: from the last failure on
        ]
    )
    np.testing.assert_allclose(regimes.measured_boundary(TOKENS, stands), [32, 128, 2048, np.inf, 2048])


@settings(max_examples=40, deadline=None)
@given(dim=st.integers(2, 6), anchor=st.floats(10.0, 1e4), beta0=st.floats(1.0, 100.0))
def test_the_selectivity_line_has_the_slope_two_over_d_minus_one(dim, anchor, beta0):
    """β ∝ N^{2/(d−1)}: on the line, log β against log N has that slope, and it passes the anchor."""
    beta = np.array([beta0, 10 * beta0, 100 * beta0])
    N, B = regimes.selectivity_line(beta, np.array([anchor, np.inf, 3 * anchor]), dim)
    slope = np.polyfit(np.log(N), np.log(B), 1)[0]
    assert slope == pytest.approx(2.0 / (dim - 1), rel=1e-9)
    assert np.interp(np.log(beta0), np.log(B), np.log(N)) == pytest.approx(np.log(anchor), abs=1e-9)
    assert regimes.selectivity_line(beta, np.full(3, np.inf), dim) is None


def test_the_picture_draws_a_circle_per_standing_point_and_a_cross_per_failing_one():
    stands = np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [np.nan] * 4])
    error = np.full(stands.shape, 0.1)
    fig = regimes.plot_particle_regime([10.0, 100.0, 1000.0], TOKENS, stands, error, 2)
    ax = fig.axes[0]
    circles = next(line for line in ax.lines if line.get_marker() == "o")
    crosses = next(line for line in ax.lines if line.get_marker() == "x")
    assert len(circles.get_xdata()) == 6 and len(crosses.get_xdata()) == 2  # the unmeasured β drawn neither way
    assert max(crosses.get_ydata()) == 100.0


study = script_module("studies/mean_field_departure.py")


def test_particles_stand_for_the_mean_field_only_where_every_replica_departs_within_one_interval():
    interval = 0.5
    shift = np.array(
        [
            [[0.0, 0.5], [0.0, 0.5 + 1e-12]],  # within (a rounded time), within
            [[0.0, 1.0], [np.inf, 0.0]],  # two intervals off; one replica departed where the mean field did not
            [[np.nan, np.nan], [0.0, 0.0]],  # not run; within
        ]
    )
    np.testing.assert_array_equal(study.stands_for(shift, interval), [[1, 1], [0, 0], [np.nan, 1]])
    table = study.regime_table([10.0, 100.0, 316.0], [64, 256], study.stands_for(shift, interval), shift)
    assert "| 100 | no (off by 1) | no (off by inf) |" in table and "| 316 | - | yes |" in table
