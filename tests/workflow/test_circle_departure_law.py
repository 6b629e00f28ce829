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


def test_the_coarse_level_is_coarser(tiny_run):
    """The coarse level's cells are twice as wide: about half as many at every β."""
    with np.load(tiny_run[0]) as data:
        for beta in ("10", "14", "20"):
            fine, coarse = data[f"cost_fine_beta{beta}"][1], data[f"cost_coarse_beta{beta}"][1]
            assert 0.3 * fine < coarse < 0.7 * fine


def synthetic(tmp_path, fine, coarse, betas=((10, 0.0), (20, 1.0), (40, 2.0)), name="synthetic", width=0.05):
    """An npz of one curve pair per (β, time shift) in ``betas`` on snapshots 0, 0.5, …, 10 (NaN: not resolved)."""
    times = np.arange(0.0, 10.01, 0.5)
    curves = {"arguments": np.array(f'{{"experiment": "e", "config": "c", "width": {width}, "depth": 0.001}}'),
              "gap": np.array(0.5), "stamp": np.array(f"run {name}")}  # fmt: skip
    for beta, shift in betas:
        tag = f"beta{beta}"
        curves[f"times_{tag}"] = times
        curves[f"cells_fine_{tag}"] = fine(times - shift)
        curves[f"cells_coarse_{tag}"] = coarse(times - shift)
        curves[f"cost_fine_{tag}"], curves[f"cost_coarse_{tag}"] = np.array([1.0, 200.0]), np.array([1.0, 100.0])
    path = tmp_path / f"{name}.npz"
    np.savez(path, **curves)
    return path


def test_both_levels_are_read_up_to_their_common_end(tmp_path):
    """The fine level loses resolution at t = 7.5 (β = 10) still metastable, its coarse twin rises through the
    threshold (0.25) at 8: read up to the common end both are still metastable at 7.5 ('> 7.5 / > 7.5'), not two
    levels that differ in kind (which would leave the departure unknown); each level's own end stays in the
    table."""

    def dip(t):
        return np.where(t < 2.0, 0.5, 0.1) + np.where(t >= 7.0, 0.2 * (t - 7.0), 0.0)

    fine = lambda t: np.where(t <= 7.5, dip(t), np.nan)  # noqa: E731
    coarse = lambda t: np.where(t <= 8.5, dip(t), np.nan)  # noqa: E731
    page = tmp_path / "page.md"
    study.main(["--render", str(synthetic(tmp_path, fine, coarse)), "--markdown", str(page)])
    row = next(line for line in page.read_text().splitlines() if line.startswith("| 10 |"))
    assert row.startswith("| 10 | > 7.5 / > 7.5 | 7.5 / 8.5 |"), row


def test_several_runs_render_as_one_page_and_clashing_runs_are_refused(tmp_path):
    """Two runs' npz files with β = 10, 20 and β = 40: one page with all three β, both runs' stamps; a run that
    repeats a β, or was run at another width, is refused."""

    def curve(t):
        return np.where(t < 2.0, 0.5, 0.1) + np.where(t >= 5.0, 0.2 * (t - 5.0), 0.0)

    low = synthetic(tmp_path, curve, curve, ((10, 0.0), (20, 1.0)), "low")
    high = synthetic(tmp_path, curve, curve, ((40, 2.0),), "high")
    page = tmp_path / "page.md"
    study.main(["--render", str(low), str(high), "--markdown", str(page)])
    text = page.read_text()
    assert "From the runs: run low (its npz holds β = 10, 20); run high (its npz holds β = 40)" in text
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.count("|") == 6][2:]
    # 0.1 + 0.2 (t − 5 − shift) first above 0.25 at t = 6 + shift
    assert [(b.strip(), d.strip()) for b, d in rows] == [("10", "6 / 6"), ("20", "7 / 7"), ("40", "8 / 8")]
    with pytest.raises(SystemExit, match="repeats"):
        study.main(["--render", str(low), str(synthetic(tmp_path, curve, curve, ((20, 1.0),), "again"))])
    with pytest.raises(SystemExit, match="other settings"):
        study.main(["--render", str(low), str(synthetic(tmp_path, curve, curve, ((40, 2.0),), "wide", 0.1))])


@pytest.mark.parametrize(
    "argv, words",
    [
        (["config/config.yaml", "--experiment", "concentration"], "d = 2"),
        (["config/mean_field_circle.yaml", "--width", "-0.1"], "positive"),
        (["config/mean_field_circle.yaml", "--horizon", "-1"], "positive"),
        (["config/mean_field_circle.yaml", "--width", "0.3"], "0.25"),
        (["config/mean_field_circle.yaml", "--betas", "inf"], "finite"),
    ],
)
def test_bad_input_is_refused_before_any_solve(argv, words, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(study, "solve_curves", lambda *a, **k: pytest.fail("solved before refusing"))
    with pytest.raises(SystemExit, match=words):
        study.main(argv)
