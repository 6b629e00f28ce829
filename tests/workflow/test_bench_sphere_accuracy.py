"""benchmarks/bench_sphere_accuracy.py: the mesh solver against particles at equal W2 accuracy.

The equal-accuracy N and the cost per N² are checked against closed forms, the error against a brute-force
assignment, the page's columns against a refit of its own particle rows; no timing is asserted."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import script_module
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

ROOT = Path(__file__).resolve().parents[2]
bench = script_module("benchmarks/bench_sphere_accuracy.py")


@settings(max_examples=60, deadline=None)
@given(
    k=st.floats(1e-3, 10.0),
    s=st.floats(-1.5, -0.1),
    tokens=st.lists(st.integers(2, 100_000), min_size=2, max_size=6, unique=True),
    target=st.floats(1e-8, 1.0),
)
def test_equal_accuracy_reads_the_n_of_a_power_law(k, s, tokens, target):
    """Errors exactly k·N^s: the fit returns s and the N where k·N^s equals the target."""
    tokens = np.array(sorted(tokens), float)
    exponent, n_star = bench.equal_accuracy_tokens(tokens, k * tokens**s, target)
    assert exponent == pytest.approx(s, rel=1e-9, abs=1e-9)
    assert k * n_star**s == pytest.approx(target, rel=1e-6)


def test_equal_accuracy_refuses_errors_that_do_not_fall():
    """Errors that grow or stay flat with N: no N reaches a smaller error, refused; so are one N, a zero error and a
    non-positive target."""
    with pytest.raises(ValueError, match="does not fall"):
        bench.equal_accuracy_tokens([100, 200, 400], [0.1, 0.12, 0.2], 1e-3)
    with pytest.raises(ValueError, match="does not fall"):
        bench.equal_accuracy_tokens([100, 200], [0.1, 0.1], 1e-3)
    with pytest.raises(ValueError, match="two or more"):
        bench.equal_accuracy_tokens([100], [0.1], 1e-3)
    with pytest.raises(ValueError, match="two or more"):
        bench.equal_accuracy_tokens([100, 200], [0.1, 0.0], 1e-3)
    with pytest.raises(ValueError, match="positive target"):
        bench.equal_accuracy_tokens([100, 200], [0.1, 0.07], 0.0)


def test_pair_seconds_leaves_out_what_every_run_pays():
    """Seconds a + b·N²: the cost per N² is b whatever a; a smaller time at the larger N (noise) is NaN."""
    tokens = np.array([256, 1024, 2048])
    assert bench.pair_seconds(tokens, 0.7 + 3e-8 * tokens**2.0) == pytest.approx(3e-8, rel=1e-9)
    assert math.isnan(bench.pair_seconds(tokens, np.array([0.1, 0.5, 0.4])))


def test_largest_w2_is_the_largest_optimal_assignment():
    """The exact W2 per snapshot against a brute-force assignment (scipy's Hungarian method) on small clouds."""
    rng = np.random.default_rng(3)
    X, Y = rng.normal(size=(3, 40, 3)), rng.normal(size=(3, 40, 3))
    brute = []
    for k in range(3):
        cost = ((X[k][:, None] - Y[k][None]) ** 2).sum(-1)
        rows, cols = linear_sum_assignment(cost)
        brute.append(math.sqrt(cost[rows, cols].mean()))
    assert bench.largest_w2(X, Y) == pytest.approx(max(brute), rel=1e-9)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--levels", "2", "--reference-level", "2"], "--levels"),
        (["--levels", "0", "--reference-level", "2"], "--levels"),
        (["--tokens", "64"], "--tokens"),
        (["--horizon", "-1"], "--horizon"),
        (["--betas", "inf"], "finite"),
        (["--horizon", "inf"], "finite"),
        (["--blocks", "0"], "--blocks"),
    ],
)
def test_bad_arguments_are_refused_before_any_solve(argv, words):
    with pytest.raises(SystemExit, match=words):
        bench.checked(bench.parser().parse_args(argv))


def test_a_level_too_coarse_for_a_beta_is_refused_before_the_reference(monkeypatch):
    """Level 2 cannot resolve β = 1000 (``sphere_levels.level_resolves``): refused before any solve."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(bench, "mesh_solve", lambda *a, **k: pytest.fail("solved before refusing"))
    with pytest.raises(SystemExit, match="level 2 is too coarse for beta = 1000"):
        bench.main(["--betas", "1000", "--levels", "2", "3", "--reference-level", "4"])


def test_each_block_is_measured_against_its_own_tokens(monkeypatch):
    """Particles that do not move, against a reference that moves token i by i·10⁻⁴ along a fixed direction: each
    block's same-token error is the root mean square of its own tokens' shifts (a block measured against another
    block's tokens, or the first N, reads something else), averaged over the blocks, at most as many as fit."""
    rng = np.random.default_rng(0)
    X0 = rng.normal(size=(64, 3))
    X0 /= np.linalg.norm(X0, axis=1, keepdims=True)
    shift = 1e-4 * np.arange(64)[:, None] * np.array([1.0, 0.0, 0.0])
    ref = np.stack([X0, X0 + shift])  # (time, token, 3)
    monkeypatch.setattr(bench, "particle_solve", lambda M, beta, grid, X: (np.stack([X, X]), 1.0))
    n, count, seconds, error, rms = bench.particle_errors(None, 10.0, None, X0, ref, 16, 3)
    assert (n, count, seconds) == (16, 3, 1.0)
    expected = [math.sqrt(np.mean(np.sum(shift[b * 16 : (b + 1) * 16] ** 2, axis=1))) for b in range(3)]
    assert rms == pytest.approx(np.mean(expected), rel=1e-12)
    assert error <= rms + 1e-15
    assert bench.particle_errors(None, 10.0, None, X0, ref, 32, 4)[1] == 2


def test_equal_error_reads_both_rates_and_neither_where_the_errors_do_not_fall():
    """Errors 0.5·N^(−1/2) and seconds 0.3 + 2e-8·N²: both readings give N* = (0.5/target)² and its cost 2e-8·N*²;
    errors that grow with N give neither."""
    tokens = np.array([128.0, 512.0, 2048.0])
    equal = bench.at_equal_error(tokens, 0.3 + 2e-8 * tokens**2, 0.5 * tokens**-0.5, 1e-3)
    for key in ("fitted", "half"):
        s, n_star, cost = equal[key]
        assert s == pytest.approx(-0.5) and n_star == pytest.approx(2.5e5, rel=1e-9)
        assert cost == pytest.approx(2e-8 * 2.5e5**2, rel=1e-6)
    rising = bench.at_equal_error(tokens, tokens**2 * 1e-8, np.array([0.1, 0.2, 0.3]), 1e-3)
    assert all(math.isnan(v) for reading in rising.values() for v in reading[1:])


def test_the_bracket_widens_the_finest_level_by_the_references_error():
    """Levels errring 4e-3 and 1e-3 (a fourfold fall): the reference's error is about 2.5e-4, the finest level's own
    in [7.5e-4, 1.25e-3], and N* (fitted, s = −1/2) scales by (e/1e-3)^(−2) at each end."""
    equal = {"fitted": (-0.5, 1e6, 100.0), "half": (-0.5, 1e6, 100.0)}
    rows = [(10.0, 2, 0, 0, 1.0, 4e-3, 4e-3, equal), (10.0, 3, 0, 0, 1.0, 1e-3, 1e-3, equal)]
    text = bench.reference_bracket(rows + [(10.0, 4, 0, 0, 1.0, float("nan"), float("nan"), {})], 10.0)
    assert "falls 4-fold from level 2 to 3" in text and "[0.00075, 0.00125]" in text
    assert f"[{1e6 * 1.25**-2:.3g}, {1e6 * 0.75**-2:.3g}]" in text
    assert bench.reference_bracket(rows[1:], 10.0) == ""


def test_the_page_reads_each_level_against_particles_at_equal_error(tmp_path):
    """A tiny run (levels 1 and 2 against 3, N = 32, 64, 128): every mesh row's N* and particle seconds are what a
    refit of the page's own particle rows gives (numpy.polyfit on log–log; the N^(-1/2) line through the largest N),
    the finer level's error is below the coarser's (convergence), the same-token error is at least the W2 one, and
    the particles' error falls with N."""
    out = tmp_path / "acc.md"
    argv = ["--betas", "10", "--horizon", "0.25", "--levels", "1", "2", "--reference-level", "3"]
    argv += ["--tokens", "32", "64", "128", "--markdown", str(out)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_sphere_accuracy.py"), *argv],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if line.startswith("| 10 ")]
    mesh = [r for r in rows if len(r) == 14 and "reference" not in r[1]]
    particles = np.array([[float(c) for c in r] for r in rows if len(r) == 7])
    assert len(mesh) == 2 and particles.shape == (3, 7), out.read_text()
    tokens, blocks, seconds, errors, rms = (particles[:, k] for k in (1, 2, 3, 5, 6))
    assert list(blocks) == [4, 2, 1]  # disjoint blocks of the 128 tokens, at most 4
    assert np.all(np.diff(errors) < 0) and np.all(rms >= errors * (1 - 1e-3)), (errors, rms)
    slope, intercept = np.polyfit(np.log(tokens), np.log(errors), 1)
    per_pair = (seconds[-1] - seconds[-2]) / (tokens[-1] ** 2 - tokens[-2] ** 2)
    level_errors = []
    for r in mesh:
        error, same, s, n_fit, n_half = (float(r[k]) for k in (6, 7, 8, 9, 11))
        level_errors.append(error)
        assert same >= error * (1 - 1e-3)
        assert s == pytest.approx(slope, abs=2e-3)  # the page prints 3 digits
        # the page's 3 digits, extrapolated over decades of N, move N* by a few per cent (a wrong rule by orders)
        assert n_fit == pytest.approx(math.exp((math.log(error) - intercept) / slope), rel=0.1)
        assert n_half == pytest.approx(tokens[-1] * (errors[-1] / error) ** 2, rel=0.02)
        if per_pair > 0:
            assert float(r[10]) == pytest.approx(per_pair * n_fit**2, rel=0.25)
            assert float(r[12]) == pytest.approx(per_pair * n_half**2, rel=0.1)
    assert level_errors[1] < level_errors[0]
    assert "falls" in out.read_text()  # the bracket by the reference's error


def test_the_ratio_reads_every_finite_reading():
    assert bench.ratio_range(2.0, 10.0, 40.0) == "5 – 20"
    assert bench.ratio_range(2.0, float("nan"), 40.0) == "20"
    assert bench.ratio_range(2.0, float("nan"), float("nan")) == "—"
