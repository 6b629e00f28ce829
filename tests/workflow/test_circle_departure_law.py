"""studies/circle_departure_law.py: the circle's mean field at two cell widths, its departures and the law in β read
from them at every threshold; the page rebuilt from the npz alone."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import script_module

ROOT = Path(__file__).resolve().parents[2]
study = script_module("studies/circle_departure_law.py")


def brute_departure(times, dist, threshold):
    """The rule written out: the first snapshot after the curve has been below the threshold at which it is above
    it; NaN where it never came below, inf where it never rose again."""
    below = np.flatnonzero(dist < threshold)
    if below.size == 0:
        return np.nan
    after = np.flatnonzero((np.arange(dist.size) > below[0]) & (dist > threshold))
    return float(times[after[0]]) if after.size else np.inf


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Three β to t = 6 on coarse cells (0.2 graded to 0.01, and 0.4): seconds, not minutes."""
    tmp = tmp_path_factory.mktemp("circle_law")
    cfg = yaml.safe_load((ROOT / "config" / "mean_field_circle.yaml").read_text())
    cfg["experiments"]["mean_field_circle"]["time"] = {"horizon": 6.0, "dt": 0.05, "snapshots": 12}
    config = tmp / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out, page = tmp / "law.npz", tmp / "law.md"
    argv = [str(config), "--betas", "10", "14", "20", "--width", "0.2", "--depth", "0.01"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "studies" / "circle_departure_law.py"), *argv, "--out", str(out),
         "--markdown", str(page)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, page, tmp


def test_the_page_reads_each_departure_as_the_rule_written_out(tiny_run):
    """Every β's departure on both widths, as the page prints it, is the rule written out on the npz's curves."""
    out, page, _ = tiny_run
    with np.load(out) as data:
        curves = {k: data[k] for k in data.files}
        threshold = float(data["gap"]) / 2
    cells = [line.split("|")[1:-1] for line in page.read_text().splitlines() if line.count("|") == 6]
    rows = {c[0].strip(): c[1].strip() for c in cells if c[0].strip() in ("10", "14", "20")}
    assert set(rows) == {"10", "14", "20"}, page.read_text()
    for beta in ("10", "14", "20"):
        times = curves[f"times_beta{beta}"]
        cells = []
        for level in ("fine", "coarse"):
            found = brute_departure(times, curves[f"cells_{level}_beta{beta}"], threshold)
            cells.append("none" if np.isnan(found) else f"> {times[-1]:g}" if np.isinf(found) else f"{found:g}")
        assert rows[beta] == " / ".join(cells)


def test_render_rebuilds_the_page_from_the_npz_alone(tiny_run):
    """--render writes the same tables and law lines as the run did (only the stamp says how it was made)."""
    out, page, tmp = tiny_run
    rendered = tmp / "rendered.md"
    study.main(["--render", str(out), "--markdown", str(rendered)])
    body = page.read_text().splitlines()[3:]
    assert rendered.read_text().splitlines()[3:] == body
    assert "--render" in rendered.read_text().splitlines()[2]
    assert any(line.startswith("| 0.5 | 0.259 |") for line in body)  # the threshold sweep holds the rule's own q


@pytest.mark.parametrize(
    "argv, words",
    [
        (["config/config.yaml", "--experiment", "concentration"], "d = 2"),
        (["config/mean_field_circle.yaml", "--width", "-0.1"], "positive"),
        (["config/mean_field_circle.yaml", "--horizon", "-1"], "positive"),
    ],
)
def test_bad_input_is_refused_before_any_solve(argv, words, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(study, "solve_curves", lambda *a, **k: pytest.fail("solved before refusing"))
    with pytest.raises(SystemExit, match=words):
        study.main(argv)
