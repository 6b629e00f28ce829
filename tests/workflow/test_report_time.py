"""reports/paper_scale_report.py's wall time of a run: the union of its jobs' log spans."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from conftest import script_module
from hypothesis import given, settings
from hypothesis import strategies as st

report = script_module("reports/paper_scale_report.py")
T0 = datetime(2026, 1, 1, 9, 0, 0)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 120)), min_size=1, max_size=12))
def test_busy_time_is_the_length_of_the_union_of_the_spans(raw):
    """Against a count of the covered one-second cells: spans side by side count once, gaps not at all."""
    spans = [(at(a), at(a + d)) for a, d in raw]
    covered = set()
    for a, d in raw:
        covered.update(range(a, a + d))
    assert report.busy_seconds(spans) == pytest.approx(len(covered))


def test_a_rule_rerun_an_hour_later_adds_its_span_not_the_wait(tmp_path):
    """Two jobs side by side for 40 min, then a fit rerun an hour later for 2 min: 42 min of wall time, where the
    first-to-last span would say 102."""
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = {"a.log": (0, 2400), "b.log": (600, 1800), "fit.log": (6000, 6120)}
    for name, (a, b) in lines.items():
        (logs / name).write_text(
            f"{at(a):%Y-%m-%d %H:%M:%S},000 INFO start\nnot a stamped line\n{at(b):%Y-%m-%d %H:%M:%S},123 INFO end\n"
        )
    spans = report.job_spans(logs)
    start, end = report.run_span(logs)
    assert (end - start).total_seconds() == 6120
    assert report.busy_seconds(spans) == 2520
    with pytest.raises(SystemExit, match="no timestamped log lines"):
        report.job_spans(tmp_path)
