"""Where particles stand for the mean field: the measured boundary, the selectivity line, the study's verdict per
(β, N) from departure shifts, and the picture."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from conftest import script_module
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.analysis import fitting
from lowtemp.plotting import regimes

TOKENS = np.array([64, 256, 1024, 4096])


def test_the_boundary_lies_between_the_last_failing_and_the_first_standing_n():
    stands = np.array(
        [
            [True, True, True, True],  # every N: below the smallest, no point
            [False, True, True, True],
            [False, False, False, True],
            [False, False, False, False],  # none: beyond the largest
            [False, True, False, True],  # a failure above a success: from the last failure on
        ]
    )
    np.testing.assert_allclose(regimes.measured_boundary(TOKENS, stands), [np.nan, 128, 2048, np.inf, 2048])
    # a β where every N stands gives no point: the line is anchored at the lowest β with a measured one
    N, B = regimes.selectivity_line([10.0, 31.6, 100.0, 316.0, 1000.0], regimes.measured_boundary(TOKENS, stands), 2)
    assert np.interp(np.log(31.6), np.log(B), np.log(N)) == pytest.approx(np.log(128.0))


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
    assert "| 100 | no (off by Δt = 1) | no (off by Δt = inf) |" in table and "| 316 | - | yes |" in table


sphere_report = script_module("reports/sphere_report.py")


def test_the_sphere_report_compares_each_replicas_departure_with_the_references():
    """fit.nc's reference departures (a different time per replica) against particle_error.nc's distances to E1(A):
    a replica leaving one snapshot interval after its own reference stands for it (on a grid of step 0.1, where one
    interval read off the times can exceed the step by rounding), one leaving at the other replica's time does not,
    one still metastable where the reference left does not; both metastable to the horizon agree."""
    t = np.linspace(0.0, 8.0, 81)
    gap = 0.6
    k = next(k for k in range(40, 60) if t[k + 1] - t[k] > t[1] - t[0])  # one interval, rounded up
    early, late = t[k], t[k + 10]

    def curve(leave):  # arrives at t = 1, above gap/2 from ``leave`` on (never when None)
        rising = 0.0 if leave is None else np.where(t >= leave, gap, 0.0)
        return np.where(t < 1.0, gap * (1 - t), 0.0) + rising

    fit = xr.Dataset(
        {
            "departure_time": (("beta", "replica"), [[early, late], [np.nan, np.nan]]),
            "departure_censored": (("beta", "replica"), [[False, False], [True, True]]),
        },
        coords={"beta": [10.0, 100.0], "replica": [0, 1]},
        attrs={"end_phase_gap": gap},
    )
    dist = np.stack(
        [
            [[curve(t[k + 1]), curve(late)], [curve(late), curve(early)]],  # n = 64: its own; n = 256: swapped
            [[curve(None), curve(None)], [curve(None), curve(7.0)]],  # both stay; one replica leaves at 7
        ]
    )
    pe = xr.Dataset(
        {"dist_leading_A": (("beta", "tokens", "replica", "time"), dist)},
        coords={"beta": [10.0, 100.0], "tokens": [64, 256], "replica": [0, 1], "time": t},
    )
    lines, stands = sphere_report.particle_departures(fit, pe)
    np.testing.assert_array_equal(stands, [[1, 0], [1, 0]])
    assert lines[2].endswith(" (with it) | " + f"{late:g}, {early:g} (elsewhere) |")
    assert lines[3] == "| 100 | > 8, > 8 | > 8, > 8 (with it) | > 8, 7 (elsewhere) |"


def test_particles_metastable_where_the_reference_stopped_early_are_not_judged():
    """The reference resolved to t = 5 only, still metastable there; particles metastable to 5 are not judged
    (NaN), particles that left at 3 are off; with the reference resolved to the horizon the first agree."""
    t = np.linspace(0.0, 10.0, 21)
    gap = 0.6

    def curve(leave):
        return np.where(t < 1.0, gap * (1 - t), 0.0) + np.where(t >= leave, gap, 0.0)

    particles = np.stack([curve(7.0), curve(3.0)])
    stopped = fitting.geometric_departure(t[t <= 5.0], curve(99.0)[t <= 5.0], gap)
    shift = study.particle_shift(t, 5.0, particles, stopped, gap)
    assert np.isnan(shift[0]) and np.isinf(shift[1])
    whole = fitting.geometric_departure(t, curve(99.0), gap)
    np.testing.assert_array_equal(study.particle_shift(t, 10.0, particles[:1] * 0 + curve(99.0), whole, gap), [0.0])


def test_a_reference_that_departed_at_its_last_resolved_snapshot_is_compared_with_the_whole_particle_curves():
    """The reference resolved to t = 6 and departed at 6; particles leaving at 6.5 (one interval later) and at 6
    stand for it, particles leaving at 7.5 do not: the particles' curves are not cut where the reference stops."""
    t = np.linspace(0.0, 10.0, 21)
    gap = 0.6

    def curve(leave):
        return np.where(t < 1.0, gap * (1 - t), 0.0) + np.where(t >= leave, gap, 0.0)

    reference = fitting.geometric_departure(t[t <= 6.0], curve(6.0)[t <= 6.0], gap)
    shift = study.particle_shift(t, 6.0, np.stack([curve(6.5), curve(6.0), curve(7.5)]), reference, gap)
    np.testing.assert_allclose(shift, [0.5, 0.0, 1.5])
    np.testing.assert_array_equal(study.stands_for(shift[None, None, :2], 0.5), [[1.0]])
    assert study.stands_for(shift[None, None], 0.5)[0, 0] == 0.0


def test_a_reference_stopped_before_it_arrived_judges_no_replica():
    """The reference resolved to t = 0.5 only, before it reached the metastable phase: particles that have not
    arrived either, and particles that arrived, are both not judged (its departure is unknown)."""
    t = np.linspace(0.0, 10.0, 21)
    gap = 0.6
    slow = np.where(t < 3.0, gap * (1 - t / 3), 0.0) + np.where(t >= 7.0, gap, 0.0)  # arrives at t = 1.5 or so
    fast = np.where(t < 0.25, gap * (1 - 4 * t), 0.0) + np.where(t >= 4.0, gap, 0.0)  # arrives by t = 0.5
    reference = fitting.geometric_departure(t[t <= 0.5], slow[t <= 0.5], gap)
    assert np.isnan(reference[0]) and not reference[1]  # never arrived, by t = 0.5
    assert np.all(np.isnan(study.particle_shift(t, 0.5, np.stack([slow, fast]), reference, gap)))
    # resolved to the horizon, the same reference is compared: the fast particles left 3 units earlier
    whole = fitting.geometric_departure(t, slow, gap)
    np.testing.assert_allclose(study.particle_shift(t, 10.0, np.stack([slow, fast]), whole, gap), [0.0, 3.0])


def test_the_boundary_slope_and_summary():
    """A boundary at N = 128 (β = 10) and 2048 (β = 100): slope log(10)/log(16); one β below the smallest N and one
    beyond the largest are named and left out of the slope; a single finite point gives no slope."""
    boundary = np.array([128.0, 2048.0, np.inf])
    assert regimes.boundary_slope([10.0, 100.0, 1000.0], boundary) == pytest.approx(np.log(10) / np.log(16))
    assert np.isnan(regimes.boundary_slope([10.0, 100.0], [128.0, np.inf]))
    stands = np.array([[1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0], [np.nan] * 4])
    text = study.boundary_summary([10.0, 31.6, 100.0, 316.0, 1000.0], list(TOKENS), stands, 2)
    assert text.startswith("Measured boundary: β = 10: below N = 64; β = 31.6: N ≈ 128; β = 100: N ≈ 2048; ")
    assert "β = 316: beyond N = 4096; β = 1000: not placed (not judged at every N)." in text
    assert f"along it: {np.log(100 / 31.6) / np.log(16):.2f}; the selectivity scaling's: 2." in text


def test_a_beta_not_run_at_the_larger_n_is_a_lower_bound_only_where_none_of_its_n_stands():
    """β = 316 run at N = 64, 256 only: neither stands, so the boundary lies beyond 256 (a lower bound, out of the
    slope); β = 1000 run there too with N = 256 standing (the violation of 'beyond') is not placed: whether the
    larger N stand is not known. No β judged at all reads so, not an empty list."""
    stands = np.array([[0, 1, 1, 1], [0, 0, 0, 1], [0, 0, np.nan, np.nan], [0, 1, np.nan, np.nan]], dtype=float)
    text = study.boundary_summary([10.0, 100.0, 316.0, 1000.0], list(TOKENS), stands, 2)
    assert "β = 316: beyond N = 256 (not judged at larger N); β = 1000: not placed (not judged at every N)." in text
    assert f"along it: {np.log(10) / np.log(16):.2f};" in text  # 10 and 100 only
    assert study.boundary_summary([10.0], list(TOKENS), np.full((1, 4), np.nan), 2).startswith(
        "Measured boundary: β = 10: not placed"
    )
    assert study.boundary_summary([], list(TOKENS), np.zeros((0, 4)), 2).startswith("Measured boundary: none")


def test_a_boundary_between_the_same_two_n_at_every_beta_is_not_resolved():
    stands = np.array([[0, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 0]])
    text = study.boundary_summary([10.0, 31.6, 100.0], list(TOKENS), stands, 2)
    assert "along it: not resolved (it lies between the same two measured N at every β" in text


def test_a_reference_still_metastable_at_the_horizon_gives_a_lower_bound_not_a_boundary():
    """β = 10: the reference departed, the boundary between 256 and 1024 is measured; β = 100: it is still
    metastable at t = 10, only N = 16 384 stayed with it, so that 'yes' is 'to t = 10', the boundary a lower bound,
    and no slope is measured from one firm β. Without the horizon the same data would give a slope (the must-fail)."""
    tokens = [256, 1024, 4096, 16384]
    stands = np.array([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    shift = np.zeros((2, 4, 2))
    still = [np.nan, 10.0]
    table = study.regime_table([10.0, 100.0], tokens, stands, shift, still)
    assert "| 10 | no (off by Δt = 0) | yes | yes | yes |" in table
    assert table.endswith("| yes to t = 10 (both still metastable) |")
    summary = study.boundary_summary([10.0, 100.0], tokens, stands, 3, still)
    assert "β = 10: N ≈ 512" in summary and "β = 100: N ≈ 8192 or more (the reference is still metastable" in summary
    assert "along it: not measured" in summary
    assert "along it: 0.83" in study.boundary_summary([10.0, 100.0], tokens, stands, 3)
    fig = regimes.plot_particle_regime([10.0, 100.0], tokens, stands, np.zeros((2, 4)), 3, horizon=still)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("a lower bound" in x for x in labels) and any("to the horizon" in x for x in labels)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    np.testing.assert_allclose(lines["measured boundary (midpoint between N)"].get_xdata(), [512.0])  # β = 10 alone
    scaling = next(line for label, line in lines.items() if label.startswith("β ∝"))  # anchored at β = 10's point
    assert np.interp(np.log(10.0), np.log(scaling.get_ydata()), np.log(scaling.get_xdata())) == pytest.approx(
        np.log(512.0)
    )
