"""studies/sphere_departure.py: the verdict per (β, N) of whether the particles stand for the d = 3 mean field, and
a short real run that writes it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import script_module

study = script_module("studies/sphere_departure.py")


def rows(shifts: dict[float, list[list[float]]], interval: float = 0.25) -> list[dict]:
    """Finished β as the study keeps them: per N the departure shift of every replica."""
    return [
        {
            "beta": beta,
            "interval": interval,
            "still": np.nan,
            **{f"N{n}_shift": np.array(s) for n, s in zip((256, 1024), per_n)},
        }
        for beta, per_n in shifts.items()
    ]


def test_a_replica_two_intervals_off_makes_the_verdict_no():
    """Within one interval on every replica: yes; one replica two intervals off, or departed where the reference
    did not (inf): no; a replica not judged (NaN, the reference stopped early): the cell is not judged."""
    args = SimpleNamespace(tokens=[256, 1024])
    stands, shift = study.regime(args, rows({10.0: [[0.0, 0.25], [0.5, 0.0]], 100.0: [[np.inf, 0.0], [np.nan, 0.0]]}))
    assert shift.shape == (2, 2, 2)
    np.testing.assert_array_equal(stands, [[1.0, 0.0], [0.0, np.nan]])
    # the must-fail input: the late replica moved back within one interval turns the verdict to yes
    stands, _ = study.regime(args, rows({10.0: [[0.0, 0.25], [0.25, 0.0]]}))
    np.testing.assert_array_equal(stands, [[1.0, 1.0]])


def test_no_picture_where_no_beta_is_judged_at_every_n(tmp_path):
    """A β with one N not judged is left out of the picture; with no β left there is no picture (and no error)."""
    figure = tmp_path / "regime.png"
    args = SimpleNamespace(tokens=[256, 1024], figure=str(figure))
    one = rows({10.0: [[0.0, 0.0], [np.nan, np.nan]]})
    for r in one:
        r.update({"N256_gap": 0.01, "N1024_gap": 0.01})
    study.regime_figure(args, one)
    assert not figure.exists()
    judged = rows({10.0: [[0.0, 0.0], [0.0, 0.0]]})
    for r in judged:
        r.update({"N256_gap": 0.01, "N1024_gap": 0.01})
    study.regime_figure(args, judged)
    assert figure.stat().st_size > 0


def test_a_short_run_writes_the_regime_and_its_picture(tmp_path):
    """β = 10 to t = 1.25 (levels 2 and 3) against N = 8, 16: the page has the regime section linking the picture,
    the picture exists, the npz holds every replica's departure shift, and the per-snapshot table (every 4th of six
    snapshots) lists the curves alone; the N given out of order are read increasing."""
    page, out, figure = tmp_path / "page.md", tmp_path / "curves.npz", tmp_path / "img" / "regime.png"
    figure.parent.mkdir()
    argv = ["--betas", "10", "--horizons", "1.25", "--levels", "2", "3", "--tokens", "16", "8", "--replicas", "2"]
    study.main([*argv, "--markdown", str(page), "--out", str(out), "--figure", str(figure)])
    text = page.read_text()
    assert "## Where the particles stand for the mean field" in text
    assert "| 10 | yes | yes |" in text  # at t = 1.25 neither has arrived at the metastable phase: they agree
    assert "| t | mesh coarse | mesh fine | particles N8 | particles N16 | mesh fine: to E1(V) |" in text
    assert "## Where the mean field ends" in text and "| 10 | 1.25 | no metastable phase; " in text  # not arrived yet
    assert "\n| 1 | " in text
    assert "](img/regime.png)" in text and figure.stat().st_size > 0
    curves = np.load(out)
    assert curves["shift_N8_beta10"].shape == (2,) and curves["shift_N16_beta10"].shape == (2,)


def test_the_end_phase_is_on_v_still_approaching_settled_elsewhere_or_not_departed():
    """Curves on the study's grid (gap 0.5 between the eigenspaces, Conjecture 1's tolerance 0.1): a mean field that
    departs at t = 4 and reaches V's eigenspace is 'on it'; one whose distance still falls over the run's last tenth
    is 'still approaching', one rising there 'moving away from it'; one that stops off it is 'off it' with its
    change (the violation the page must show); one still on E1(A) at the horizon is 'not departed', one that
    departs within the last tenth too late to read, one that never arrived at E1(A) says so; NaN after a stopped
    solve is not read."""
    t = np.linspace(0.0, 20.0, 81)
    to_a = np.where(t < 2.0, 1.0, np.where(t < 4.0, 0.05, 0.5))  # arrives at 2, departs at 4
    on_v = np.maximum(1.0 - 0.2 * t, 0.02)
    falling = 1.0 - 0.0455 * t  # 0.181 at t = 18, 0.09 at 20: fell by half over the last tenth
    elsewhere = np.where(t < 8.0, 1.0 - 0.1 * t, 0.25)
    describe = study.describe_end_phase
    assert describe(t, to_a, on_v, 0.5, 0.1) == "0.02 (on it)"
    assert describe(t, to_a, falling, 0.5, 0.1) == "0.09 (on it)"  # within the tolerance at the horizon
    assert describe(t, to_a, falling + 0.05, 0.5, 0.1) == "0.14 (still approaching)"
    assert describe(t, to_a, elsewhere, 0.5, 0.1) == "0.25 (off it, +0.0% over the run's last tenth)"
    assert (
        describe(t, to_a, np.where(t < 18.0, 0.25, 0.25 + 0.5 * (t - 18.0)), 0.5, 0.1) == "1.25 (moving away from it)"
    )
    assert describe(t, np.where(t < 2.0, 1.0, 0.05), on_v, 0.5, 0.1) == "not departed"
    late = np.where(t < 2.0, 1.0, np.where(t < 19.5, 0.05, 0.5))
    assert describe(t, late, elsewhere, 0.5, 0.1) == "0.25 (departed in the run's last tenth: too late to read)"
    slow = np.where(t < 8.0, 1.0 - 0.1 * t, 0.25 - 0.002 * (t - 8.0))  # 0.229 to 0.225 over the last tenth
    assert describe(t, to_a, slow, 0.5, 0.1) == "0.226 (off it, -1.7% over the run's last tenth)"
    assert describe(t, np.full(t.size, 0.5), on_v, 0.5, 0.1) == "no metastable phase; 0.02 (on it)"
    stopped = np.where(t <= 10.0, to_a, np.nan)
    assert describe(t, stopped, np.where(t <= 10.0, elsewhere, np.nan), 0.5, 0.1).startswith("0.25 (off it, +0.0%")
    assert describe(t, np.full(t.size, np.nan), on_v, 0.5, 0.1) == "not reached"


def test_a_page_renders_again_from_its_npz_and_merges_the_beta_of_two_runs(tmp_path):
    """Two short runs (β = 10 at N = 8, 16; β = 31.6 at N = 8): rendering the first's npz gives its page line for
    line but the stamp; rendering both gives one page with both β, the N not run at 31.6 'not run' and not judged
    ('-'), each β's run named in the stamp; an npz written before its settings were recorded renders from the
    command its stamp names. The violations: a β in two files, or files run with other replicas, are refused."""
    short = ["--horizons", "1.25", "--levels", "2", "3", "--replicas", "2"]
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    study.main(
        ["--betas", "10", "--tokens", "8", "16", *short, "--markdown", str(tmp_path / "a.md"), "--out", str(first)]
    )
    study.main(["--betas", "31.6", "--tokens", "8", *short, "--out", str(second), "--figure", str(tmp_path / "b.png")])
    again = tmp_path / "again.md"
    study.main(["--render", str(first), "--markdown", str(again)])
    ran, rendered = (tmp_path / "a.md").read_text().splitlines(), again.read_text().splitlines()
    assert ran[3:] == rendered[3:] and ran[2] != rendered[2]
    assert "from β = 10: the run of `python studies/sphere_departure.py --betas 10" in rendered[2]
    both = tmp_path / "both.md"
    study.main(["--render", str(first), str(second), "--markdown", str(both)])
    text = both.read_text()
    assert "| 31.6 | 1.25 | 3 / 2 |" in text and "| not run | — |" in text
    assert "| 31.6 | yes | - |" in text  # N = 16 not run at β = 31.6: not judged
    assert "β = 10: the run of" in text and "β = 31.6: the run of" in text
    assert "b.png" not in text.splitlines()[2]  # a run's output path is no part of the command a stamp names
    with np.load(first) as z:  # as the study wrote it before it recorded its settings and levels
        old = {k: z[k] for k in z.files if not k.startswith(("arguments", "levels_", "solve_"))}
    np.savez(tmp_path / "old.npz", **old)
    study.main(["--render", str(tmp_path / "old.npz"), "--markdown", str(tmp_path / "old.md")])
    old_page = (tmp_path / "old.md").read_text().splitlines()
    assert old_page[4:8] == rendered[4:8] and "| 10 | 1.25 | 3 / 2 |" in old_page[8]
    settings = {
        k: v for k, v in json.loads(str(np.load(first)["arguments"])).items() if k not in ("block", "root_seed")
    }
    np.savez(tmp_path / "unblocked.npz", **{**np.load(first), "arguments": np.array(json.dumps(settings))})
    study.main(["--render", str(tmp_path / "unblocked.npz"), "--markdown", str(tmp_path / "unblocked.md")])
    assert (tmp_path / "unblocked.md").read_text().splitlines()[3:] == rendered[3:]  # the block from the config
    assert old_page[8].endswith("| — | — | — |")  # the cost its npz did not record
    with pytest.raises(SystemExit, match="repeats times_beta10"):
        study.main(["--render", str(first), str(first)])
    with pytest.raises(SystemExit, match="takes no tokens"):  # a run's option would be ignored: refused
        study.main(["--render", str(first), "--tokens", "8"])
    with pytest.raises(SystemExit, match="a.md is not a study npz"):
        study.main(["--render", str(tmp_path / "a.md")])
    with pytest.raises(SystemExit, match="must differ in their first 6 digits"):  # both would be beta31.6228
        study.main(["--betas", "31.62277", "31.62278"])
    with np.load(second) as z:
        b = {k: z[k] for k in z.files}
    b["times_beta31.6"] = b["times_beta31.6"] * (1 + 4e-16)  # one linspace's rounding: the same interval
    np.savez(tmp_path / "ulp.npz", **b)
    study.main(["--render", str(first), str(tmp_path / "ulp.npz"), "--markdown", str(tmp_path / "ulp.md")])
    b["times_beta31.6"] = b["times_beta31.6"] * 2.0
    np.savez(tmp_path / "twice.npz", **b)
    with pytest.raises(SystemExit, match="snapshot intervals differ"):
        study.main(["--render", str(first), str(tmp_path / "twice.npz")])
    # no β judged at every N (β = 10 lacks N = 32, β = 31.6 N = 16): no picture, no link, an older one removed
    b["times_beta31.6"] = b["times_beta31.6"] / 2.0
    b["particles_N32_beta31.6"], b["shift_N32_beta31.6"] = b.pop("particles_N8_beta31.6"), b.pop("shift_N8_beta31.6")
    np.savez(tmp_path / "n32.npz", **b)
    stale = tmp_path / "stale.png"
    stale.write_bytes(b"an older picture")
    study.main(["--render", str(first), str(tmp_path / "n32.npz"), "--markdown", str(both), "--figure", str(stale)])
    assert not stale.exists() and "](stale.png)" not in both.read_text()
    assert "β = 10: not placed (not judged at every N); β = 31.6: not placed" in both.read_text()
    study.main(["--betas", "100", "--tokens", "8", *short[:-1], "3", "--out", str(tmp_path / "c.npz")])
    with pytest.raises(SystemExit, match="was run with"):
        study.main(["--render", str(first), str(tmp_path / "c.npz")])


def test_two_jobs_give_the_same_numbers_and_a_level_that_stopped_is_named(tmp_path):
    """β = 10 to t = 1.25 with the two levels solved side by side (``--jobs 2``, checkpointed) writes the same
    curves, bit for bit, as one after the other, and leaves no checkpoint once the npz holds them; neither stopped,
    so the page lists none. The same npz with the fine level marked as stopped by the solver renders that reason on
    the page (and the page without the mark does not)."""
    short = ["--betas", "10", "--horizons", "1.25", "--levels", "2", "3", "--tokens", "8", "--replicas", "2"]
    one, two = tmp_path / "one.npz", tmp_path / "two.npz"
    study.main([*short, "--out", str(one)])
    folder = tmp_path / "checkpoints"
    study.main([*short, "--jobs", "2", "--out", str(two), "--markdown", str(tmp_path / "two.md"),
                "--checkpoints", str(folder)])  # fmt: skip
    assert not folder.exists()  # the β is in the npz: its levels' checkpoints (and their folder) are gone
    with np.load(one) as a, np.load(two) as b:
        for key in a.files:
            if key.startswith(("mesh_", "to_V_", "particles_")):
                np.testing.assert_array_equal(a[key], b[key])
        np.testing.assert_array_equal(b["stopped_beta10"], ["", ""])
        marked = {k: b[k] for k in b.files}
    assert "ended before their horizon" not in (tmp_path / "two.md").read_text()
    marked["stopped_beta10"] = np.array(["", "more than max_triangles = 9 triangles at t = 1"])
    np.savez(tmp_path / "marked.npz", **marked)
    study.main(["--render", str(tmp_path / "marked.npz"), "--markdown", str(tmp_path / "marked.md")])
    text = (tmp_path / "marked.md").read_text()
    assert "- β = 10, fine level: more than max_triangles = 9 triangles at t = 1" in text
    assert "coarse level:" not in text
    with pytest.raises(SystemExit, match="takes no jobs"):
        study.main(["--render", str(one), "--jobs", "2"])


def concentration():
    """(matrices, initial measure's name and parameters) of `concentration`, as the study reads them."""
    from lowtemp.config import experiment

    cfg, exp = study.sphere_experiment("config/config.yaml", "concentration", "test")
    params = dict(exp["initial_measure"])
    return experiment.build_matrices("concentration", exp, cfg["root_seed"]), params.pop("name"), params


def test_a_mesh_run_killed_after_a_checkpoint_goes_on_from_it_to_the_same_numbers(tmp_path, monkeypatch, caplog):
    """β = 10 on level 2 to t = 1.5: a run killed right after its third checkpoint, started again with the same
    folder, goes on from it and ends with the distances, triangles and evaluations of a run never stopped, bit for
    bit; started a third time it finds the run done and solves nothing; a run of other times finds the checkpoint
    not its own, says so and starts afresh (``store.checkpoint``'s rule); one that ended at its limit on triangles
    goes on under a larger limit."""
    from lowtemp.store import checkpoint

    M, name, params = concentration()
    times = np.linspace(0.0, 1.5, 7)
    whole = study.mesh_run(M, 10.0, times, name, params, 2, 40000, lambda _m: None)
    real, writes = checkpoint.MeshCheckpoint.save, []

    def killed_after_three(self, state, *rest):
        real(self, state, *rest)
        writes.append(state.t)
        if len(writes) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.MeshCheckpoint, "save", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        study.mesh_run(M, 10.0, times, name, params, 2, 40000, lambda _m: None, str(tmp_path))
    assert writes == [0.0, 0.25, 0.5]
    monkeypatch.setattr(checkpoint.MeshCheckpoint, "save", real)
    lines = []
    resumed = study.mesh_run(M, 10.0, times, name, params, 2, 40000, lines.append, str(tmp_path))
    assert "resumed at t = 0.5" in lines[0] and all("t = 0.25," not in line for line in lines)
    np.testing.assert_array_equal(resumed[0], whole[0])
    np.testing.assert_array_equal(resumed[1], whole[1])
    assert {k: resumed[2][k] for k in ("triangles", "nfev", "stopped")} == {
        k: whole[2][k] for k in ("triangles", "nfev", "stopped")
    }
    with monkeypatch.context() as m:
        m.setattr(study.sphere_meanfield, "solve", lambda *a, **k: pytest.fail("a done run solved again"))
        again = study.mesh_run(M, 10.0, times, name, params, 2, 40000, lines.append, str(tmp_path))
    np.testing.assert_array_equal(again[0], whole[0])
    lines.clear()
    other = study.mesh_run(M, 10.0, times[:-1], name, params, 2, 40000, lines.append, str(tmp_path))
    assert "belongs to other inputs" in caplog.text and not any("resumed" in line for line in lines)
    np.testing.assert_array_equal(other[0], whole[0][:-1])
    # a run that ended at its limit on triangles goes on under a larger one, to the numbers of a run never limited
    limited = tmp_path / "limited"
    short = study.mesh_run(M, 10.0, times, name, params, 2, 330, lines.append, str(limited))
    assert short[2]["stopped"].startswith("more than max_triangles = 330") and np.isnan(short[0][-1])
    lines.clear()
    longer = study.mesh_run(M, 10.0, times, name, params, 2, 40000, lines.append, str(limited))
    assert "within 40000 now" in lines[0] and "resumed at t = " in lines[1]
    np.testing.assert_array_equal(longer[0], whole[0])
    assert longer[2]["nfev"] == whole[2]["nfev"] and longer[2]["stopped"] == ""


def test_a_level_stopped_by_its_limit_is_named_and_read_as_stopped(tmp_path):
    """β = 10 to t = 1.25 with --max-triangles 1400: the fine level (3, 1280 triangles at t = 0) outgrows it before
    the horizon and the coarse one (2) does not; the npz records the solver's reason for the fine level alone, the
    page lists it, and its departure reads 'stopped at T before it arrived' (it had not come close to E1(A)), not
    'no metastable phase'. An npz that predates the record renders with no such list."""
    page, out = tmp_path / "page.md", tmp_path / "curves.npz"
    argv = ["--betas", "10", "--horizons", "1.25", "--levels", "2", "3", "--tokens", "8", "--replicas", "2"]
    study.main([*argv, "--max-triangles", "1400", "--markdown", str(page), "--out", str(out)])
    with np.load(out) as z:
        coarse, fine = (str(v) for v in z["stopped_beta10"])
        until = float(z["times_beta10"][np.isfinite(z["mesh_fine_beta10"])][-1])
        old = {k: z[k] for k in z.files if not k.startswith("stopped_")}
    assert coarse == "" and until < 1.25
    assert fine == f"more than max_triangles = 1400 triangles at t = {until:g}"
    text = page.read_text()
    assert f"- β = 10, fine level: {fine}" in text and "coarse level:" not in text
    assert f"| 10 | 1.25 | 3 / 2 | stopped at {until:g} before it arrived / no metastable phase |" in text
    np.savez(tmp_path / "old.npz", **old)
    study.main(["--render", str(tmp_path / "old.npz"), "--markdown", str(tmp_path / "old.md")])
    assert "ended before their horizon" not in (tmp_path / "old.md").read_text()


def test_a_level_too_coarse_or_a_bad_horizon_is_refused_before_any_solve(monkeypatch):
    """Level 2 at β = 1000 (its kernel 0.025 rad wide) and a negative horizon for a later β are refused before the
    first solve, whatever β comes first and however many jobs."""
    monkeypatch.setattr(study.sphere_meanfield, "solve", lambda *a, **k: pytest.fail("solved before the refusal"))
    with pytest.raises(SystemExit, match="at beta = 1000 the kernel is 0.0246 rad wide"):
        study.main(["--betas", "10", "1000", "--levels", "2", "3", "--tokens", "8", "--jobs", "2"])
    with pytest.raises(SystemExit, match="a horizon must be finite and positive, got -1"):
        study.main(["--betas", "10", "100", "--horizons", "14", "-1", "--levels", "2", "3", "--tokens", "8"])


def test_a_mesh_run_the_flow_outruns_keeps_what_it_reached(monkeypatch):
    """The third stretch of a β = 10 level-2 run made to underflow (the integrator's failure): the run ends with the
    snapshots before it (t = 0, 0.25, 0.5), NaN after, and the solver's reason, rather than losing the run."""
    from lowtemp.dynamics import meanfield

    M, name, params = concentration()
    real, calls = study.sphere_meanfield._advance, []

    def third_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise meanfield.StepUnderflow("the integrator failed at t = 0.6: Required step size is less than spacing")
        return real(*args, **kwargs)

    monkeypatch.setattr(study.sphere_meanfield, "_advance", third_fails)
    to_A, to_V, counts = study.mesh_run(M, 10.0, np.linspace(0.0, 1.5, 7), name, params, 2, 40000, lambda _m: None)
    assert np.all(np.isfinite(to_A[:3])) and np.all(np.isnan(to_A[3:])) and np.all(np.isnan(to_V[3:]))
    assert counts["stopped"].startswith("the integrator failed at t = 0.6") and counts["stopped"].endswith("0.5)")
