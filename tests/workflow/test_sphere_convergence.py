"""studies/sphere_convergence.py: the order estimate, the family comparison, the remeshing intervals it takes, and a
short real run."""

from __future__ import annotations

import math

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
    # differences that do not fall (rounding-level noise between two members) give no order, not a negative one
    assert np.isnan(study.observed_order(7.6e-10, 1.5e-8, 10.0))
    # differences that fall but lie below the base's floor (rtol 1e-2, 1e-3, 1e-4 at β = 10: one DOP853 step per
    # stop whatever the tolerance, 3.1e-10 then 2.0e-10) give no order, not 0.07
    assert np.isnan(study.observed_order(3.10e-10, 1.99e-10, 10.0))
    assert study.observed_order(3.1e-6, 2.0e-7, 10.0) == pytest.approx(math.log10(15.5))


def page(path, beta, base, families, interval):
    """write_markdown's page of ``families`` at ``beta`` from ``base``, as the study writes it."""
    args = study.argparse.Namespace(
        beta=beta, experiment="e", config="c.yaml", horizon=6.0, tokens=4, base=base, markdown=str(path)
    )
    study.write_markdown(args, GAP, interval, families, "stamp")


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
    differences zero (asserted on the page), the base's distance to each finest member named, the curves in the
    npz."""
    page, out = tmp_path / "page.md", tmp_path / "curves.npz"
    study.main(
        [
            "--horizon",
            "0.5",
            "--base",
            "2",
            "20",
            "1e-4",
            "0.25",
            "--levels",
            "2",
            "3",
            "--depths",
            "10",
            "20",
            "--rtols",
            "1e-3",
            "1e-4",
            "--remeshes",
            "0.25",
            "0.125",
            "--tokens",
            "8",
            "--markdown",
            str(page),
            "--out",
            str(out),
        ]
    )
    text = page.read_text()
    for heading in ("## mesh level", "## pruning depth", "## time tolerance (rtol)", "## remeshing interval"):
        assert heading in text
    # the finest member of each family is the one every other is measured against: its own differences are zero
    assert text.count("| yes | 0.00e+00 | 0.00e+00 |") == 4
    assert "So far" not in text
    assert "The base setting's largest tracer RMS to each family's finest member" in text
    # the base (level 2) is not the finest level: its level difference is not zero, the depth's (its finest) is
    assert "pruning depth 0.00e+00" in text and "mesh level 0.00e+00" not in text
    with np.load(out) as curves:
        level2, level3 = "dist_level2_depth20_rtol0.0001_remesh0.25", "dist_level3_depth20_rtol0.0001_remesh0.25"
        assert {level2, level3, "dist_level2_depth20_rtol0.0001_remesh0.125"} <= set(curves.files)
        assert np.all(np.isfinite(curves[level3]))
        # a remeshing every 0.125 is a different run from every 0.25: the solve does remesh at the member's interval
        assert not np.array_equal(curves["dist_level2_depth20_rtol0.0001_remesh0.125"], curves[level2])


def test_a_base_outside_the_values_is_refused():
    with pytest.raises(SystemExit, match="base level 3 must be among --levels"):
        study.main(["--levels", "2", "4"])
    with pytest.raises(SystemExit, match="base remesh 0.25 must be among --remeshes"):
        study.main(["--remeshes", "0.125", "0.0625"])
    with pytest.raises(SystemExit, match="base level must be an integer, got 3.7"):
        study.main(["--base", "3.7", "20", "1e-3", "0.25"])


@pytest.mark.parametrize("remesh", [0.0, -0.125, math.inf, math.nan])
def test_a_remeshing_interval_that_is_not_positive_is_refused(remesh):
    """A remeshing interval must be finite and positive; it need not divide the snapshot interval (the snapshots
    between two remeshings are read from the steps' dense output)."""
    with pytest.raises(SystemExit, match="remeshing interval must be finite and > 0"):
        study.check_remeshes([0.25, remesh])
    study.check_remeshes([0.25, 0.5, 0.1, 0.0625])
    with pytest.raises(SystemExit, match="finite and > 0"):
        study.main(["--horizon", "0.5", "--remeshes", "0.25", "0"])


def runs_of(values, base, dist_of):
    """Made-up runs of every setting the families ask for: ``dist_of(level, depth, rtol, remesh)`` the distance
    curve."""
    runs = {}
    for family, members in values.items():
        for v in members:
            setting = tuple({**base, family: v}.values())
            info = {"triangles": 320, "nfev": 1, "seconds": 0.0}
            runs[setting] = {"dist": dist_of(*setting), "tracers": np.zeros((T.size, 2, 3)), "info": info}
    return runs


def test_family_results_take_the_finest_member_of_each_family_and_its_order():
    """Levels, depths and rtols given out of order: the finest is the highest level, the deepest depth, the smallest
    rtol; a distance d* + c·h² (h halving per level) + c'·rtol + e^{−depth} gives orders 2 and 1, none for depth."""
    values = {
        "level": [4, 2, 3],
        "depth": [40.0, 10.0, 20.0],
        "rtol": [1e-5, 1e-3, 1e-4],
        "remesh": [0.0625, 0.25, 0.125],
    }
    base = {"level": 3, "depth": 20.0, "rtol": 1e-4, "remesh": 0.25}
    base_dist = member(0, 4.0)["dist"]

    def dist_of(level, depth, rtol, remesh):
        return base_dist + 0.01 * (2.0**-level) ** 2 + 10.0 * rtol + np.exp(-depth) + 1e-3 * remesh**3

    out = study.family_results(values, base, runs_of(values, base, dist_of), T, GAP, T[1] - T[0])
    assert [r["value"] for r in out["level"]["rows"]] == [2, 3, 4]
    assert [r["value"] for r in out["rtol"]["rows"]] == [1e-3, 1e-4, 1e-5]
    assert [r["value"] for r in out["depth"]["rows"]] == [10.0, 20.0, 40.0]
    assert [r["value"] for r in out["remesh"]["rows"]] == [0.25, 0.125, 0.0625]
    assert out["level"]["order"] == pytest.approx(2.0) and out["rtol"]["order"] == pytest.approx(1.0)
    assert out["remesh"]["order"] == pytest.approx(3.0)
    assert np.isnan(out["depth"]["order"])
    assert all(out[f]["stable"] and out[f]["complete"] for f in out)


def test_the_order_needs_one_step_between_members():
    assert study.resolution_ratio("level", [2, 3, 4]) == 2.0
    assert np.isnan(study.resolution_ratio("level", [2, 3, 5]))
    assert study.resolution_ratio("rtol", [1e-3, 1e-4, 1e-5]) == pytest.approx(10.0)
    assert np.isnan(study.resolution_ratio("rtol", [1e-3, 1e-4, 1e-6]))
    assert np.isnan(study.resolution_ratio("depth", [10.0, 20.0, 40.0]))


def test_a_family_whose_run_stopped_early_is_not_judged():
    """The finest member stopped (max_triangles) at t = 1.75, before anything departs, while the coarsest departs
    at 2.25: cut to the common snapshots both look metastable, so the family is not judged, not stable."""
    early_stop = member(4, 2.0)
    early_stop["dist"] = np.where(T <= 1.75, early_stop["dist"], np.nan)
    result = study.compare([member(2, 2.25), member(3, 2.0), early_stop], T, GAP, T[1] - T[0])
    assert not result["complete"] and not result["stable"] and result["last"] == 1.75


def test_one_interval_read_off_rounded_times_agrees():
    """On a grid of step 0.1 one interval between two snapshot times can exceed the step by rounding; it agrees."""
    t = np.linspace(0.0, 8.0, 81)
    k = next(k for k in range(30, 60) if t[k + 1] - t[k] > t[1] - t[0])

    def at(value, leave):
        dist = np.where(t < 1.0, GAP * (1 - t), 0.0) + np.where(t >= leave, GAP, 0.0)
        return {"value": value, "ratio": 2.0, "dist": dist, "tracers": np.zeros((t.size, 2, 3)), "info": {}}

    result = study.compare([at(2, t[k + 1]), at(3, t[k])], t, GAP, t[1] - t[0])
    assert result["stable"]
    assert not study.compare([at(2, t[k + 2]), at(3, t[k])], t, GAP, t[1] - t[0])["stable"]


def test_a_page_says_when_the_differences_do_not_fall(tmp_path):
    """The rtol family's coarser pair equal to rounding, the finer pair apart: the page gives no order and says
    why; the level family's order is printed."""
    values = {"level": [2, 3, 4], "depth": [10.0, 20.0, 40.0], "rtol": [1e-3, 1e-4, 1e-5], "remesh": [0.25, 0.125]}
    base = {"level": 3, "depth": 20.0, "rtol": 1e-4, "remesh": 0.25}
    base_dist = member(0, 4.0)["dist"]

    def dist_of(level, depth, rtol, remesh):
        return base_dist + 0.01 * (2.0**-level) ** 2 + (1e-8 if rtol < 5e-5 else 0.0) + np.exp(-depth)

    families = study.family_results(values, base, runs_of(values, base, dist_of), T, GAP, T[1] - T[0])
    page(tmp_path / "page.md", 10.0, [3, 20.0, 1e-4, 0.25], families, T[1] - T[0])
    text = (tmp_path / "page.md").read_text()
    assert (
        "## mesh level (edge halves per level): departures stable to one snapshot interval; observed order 2.00" in text
    )
    assert "the differences lie below 1e-08, the base's own floor (0.00e+00, then 1.00e-08): no order" in text


def shifted(value, shift):
    """A member departing at t = 4 whose tracers sit ``shift`` from the origin's (1e-3·value in ``member``)."""
    m = member(value, 4.0)
    m["tracers"][..., 0] = shift
    m["info"] = {"triangles": 320, "nfev": 1, "seconds": 0.0}
    return m


@pytest.mark.parametrize(("level_shift", "remesh_shift", "worst"), [(1e-3, 5e-3, "remeshing"), (5e-3, 1e-3, "mesh")])
def test_the_page_names_the_resolution_that_limits_the_base(tmp_path, level_shift, remesh_shift, worst):
    """The base (level 3, remeshing every 0.25) against each family's finest member: its distances are given per
    family and the larger one is named, whichever family it is in."""
    interval = T[1] - T[0]
    families = {
        "level": study.compare([shifted(2, 0.02), shifted(3, level_shift), shifted(4, 0.0)], T, GAP, interval),
        "remesh": study.compare([shifted(0.25, remesh_shift), shifted(0.125, 0.0)], T, GAP, interval),
    }
    base = [3, 20.0, 1e-3, 0.25]
    assert study.base_errors(families, dict(zip(study.FAMILIES, base))) == pytest.approx(
        {"level": level_shift, "remesh": remesh_shift}
    )
    page(tmp_path / "p.md", 100.0, base, families, interval)
    text = (tmp_path / "p.md").read_text()
    assert f"mesh level {level_shift:.2e}, remeshing interval {remesh_shift:.2e}; the {worst}" in text


def test_a_family_of_the_base_alone_is_left_off():
    """--depths 20 alone (the base): no depth family on the page; the others still compared."""
    values = {"level": [3, 4], "depth": [20.0], "rtol": [1e-3], "remesh": [0.25, 0.125]}
    base = {"level": 3, "depth": 20.0, "rtol": 1e-3, "remesh": 0.25}
    runs = runs_of(values, base, lambda *s: member(0, 4.0)["dist"])
    assert set(study.family_results(values, base, runs, T, GAP, T[1] - T[0])) == {"level", "remesh"}


def test_no_limit_is_named_where_the_base_is_every_family_s_finest(tmp_path):
    """Every family's finest member is the base: its distances are all zero and the page names no limiting
    resolution (it named the first family)."""
    interval = T[1] - T[0]
    families = {
        "level": study.compare([shifted(2, 0.02), shifted(3, 0.0)], T, GAP, interval),
        "remesh": study.compare([shifted(0.5, 0.01), shifted(0.25, 0.0)], T, GAP, interval),
    }
    page(tmp_path / "p.md", 10.0, [3, 20.0, 1e-3, 0.25], families, interval)
    text = (tmp_path / "p.md").read_text()
    assert "limits the base most" not in text and "## mesh level" in text


def test_differences_above_the_floor_that_do_not_fall_give_no_order(tmp_path):
    """The remeshing family at β = 100 (differences 2.5e-4 then 2.6e-4): no order, and the page says they do not
    fall (not that they lie below the floor)."""
    values = {"level": [3], "depth": [20.0], "rtol": [1e-3], "remesh": [0.25, 0.125, 0.0625]}
    base = {"level": 3, "depth": 20.0, "rtol": 1e-3, "remesh": 0.25}
    base_dist = member(0, 4.0)["dist"]
    bump = {0.25: 0.0, 0.125: 2.5e-4, 0.0625: 0.0}
    runs = runs_of(values, base, lambda level, depth, rtol, remesh: base_dist + bump[remesh])
    families = study.family_results(values, base, runs, T, GAP, T[1] - T[0])
    assert np.isnan(families["remesh"]["order"])
    page(tmp_path / "p.md", 100.0, [3, 20.0, 1e-3, 0.25], families, T[1] - T[0])
    assert (
        "the differences do not fall with the resolution (2.50e-04, then 2.50e-04): no order"
        in (tmp_path / "p.md").read_text()
    )
