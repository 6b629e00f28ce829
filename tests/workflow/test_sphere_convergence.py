"""studies/sphere_convergence.py: the order estimate, the family comparison, and a short real run."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import script_module
from hypothesis import given, settings
from hypothesis import strategies as st

study = script_module("studies/sphere_convergence.py")

T = np.linspace(0.0, 6.0, 25)
GAP = 0.5


@settings(max_examples=30, deadline=None)
@given(p=st.floats(0.5, 4.0), c=st.floats(0.01, 10.0), ratio=st.sampled_from([2.0, 10.0]))
def test_observed_order_recovers_the_power_of_a_closed_form_error(p, c, ratio):
    """d(h) = d* + c·h^p on h = 1, 1/ratio, 1/ratio²: the three-grid estimate is p."""
    h = np.array([1.0, 1 / ratio, 1 / ratio**2])
    d = 0.3 + c * h**p
    assert study.observed_order(abs(d[0] - d[1]), abs(d[1] - d[2]), ratio) == pytest.approx(p, rel=1e-9)


def test_observed_order_of_a_first_order_error_is_not_second():
    h = np.array([1.0, 0.5, 0.25])
    d = 0.3 + 0.1 * h
    assert study.observed_order(abs(d[0] - d[1]), abs(d[1] - d[2]), 2.0) == pytest.approx(1.0)
    assert np.isnan(study.observed_order(0.1, 0.0, 2.0))


def member(value, leave, tokens=4):
    """A member whose distance to E1(A) arrives at t = 1 and leaves at ``leave``; tracers shifted by value."""
    dist = np.where(T < 1.0, GAP * (1 - T), 0.0) + 10.0 * np.maximum(T - leave, 0.0)
    tracers = np.zeros((T.size, tokens, 3))
    tracers[..., 2] = 1.0
    tracers[..., 0] = 1e-3 * value
    return {"value": value, "ratio": 2.0, "dist": dist, "tracers": tracers, "info": {}}


def test_a_family_whose_departures_agree_to_one_interval_is_stable():
    interval = T[1] - T[0]
    result = study.compare([member(2, 4.0 + interval), member(3, 4.0), member(4, 4.0)], T, GAP, interval)
    assert result["stable"] and [r["agrees"] for r in result["rows"]] == [True, True, True]
    assert result["rows"][0]["tracer_rms"] == pytest.approx(2e-3)
    assert result["rows"][-1]["dist_gap"] == 0.0


def test_a_departure_two_intervals_off_makes_the_family_unstable():
    interval = T[1] - T[0]
    result = study.compare([member(2, 4.0 + 2 * interval), member(3, 4.0), member(4, 4.0)], T, GAP, interval)
    assert not result["stable"] and [r["agrees"] for r in result["rows"]] == [False, True, True]


def test_a_member_still_metastable_where_the_finest_departed_is_not_stable():
    interval = T[1] - T[0]
    result = study.compare([member(2, 99.0), member(3, 4.0)], T, GAP, interval)
    assert not result["stable"] and result["rows"][0]["departure"].startswith(">")


def test_a_short_run_writes_every_family(tmp_path):
    """Two members per family at β = 10 to t = 0.5 (level 2 and 3): every family on the page, the finest member's
    differences zero, the curves in the npz."""
    page, out = tmp_path / "page.md", tmp_path / "curves.npz"
    study.main(
        [
            "--horizon",
            "0.5",
            "--base",
            "2",
            "20",
            "1e-4",
            "--levels",
            "2",
            "3",
            "--depths",
            "10",
            "20",
            "--rtols",
            "1e-3",
            "1e-4",
            "--tokens",
            "8",
            "--markdown",
            str(page),
            "--out",
            str(out),
        ]
    )
    text = page.read_text()
    for heading in ("## mesh level", "## pruning depth", "## DOP853 rtol"):
        assert heading in text
    assert "So far" not in text
    with np.load(out) as curves:
        assert {"dist_level2_depth20_rtol0.0001", "dist_level3_depth20_rtol0.0001"} <= set(curves.files)
        assert np.all(np.isfinite(curves["dist_level3_depth20_rtol0.0001"]))


def test_a_base_outside_the_values_is_refused():
    with pytest.raises(SystemExit, match="base level 3 must be among --levels"):
        study.main(["--levels", "2", "4"])
