"""Smoke test of the benchmark script (`make bench`): it runs and writes its table.

No timing is asserted here (timings belong to the benchmark's printed ratios);
the accuracy column is, since it is a number the kernels must meet anywhere.
"""

import importlib.util
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import script_module

from lowtemp.config import schema
from lowtemp.store import netcdf

ROOT = Path(__file__).resolve().parents[2]
HAS_ORTOOLS = importlib.util.find_spec("ortools") is not None


def _bench_w2_module():
    return script_module("benchmarks/bench_w2.py")


def test_bench_quick_writes_table(tmp_path):
    out = tmp_path / "bench.nc"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_kernels.py"), "--quick", "--repeats", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = netcdf.read_netcdf(out, "bench")
    assert set(ds["kernel"].values) == {"numpy", "dense", "cap"}
    for var in ("ns_per_pair", "speedup", "peak_mb"):
        assert np.all(np.isfinite(ds[var].values)) and np.all(ds[var].values > 0), var
    # the numpy reference against itself is exact (0); the fast kernels agree with it to 1e-9
    rel = ds["rel_error"].values
    assert np.all(np.isfinite(rel)) and np.all(rel >= 0) and np.all(rel <= 1e-9), rel
    assert np.all(np.isfinite(ds["w2_exact_seconds"].values))
    assert "ns/pair" in proc.stdout and "W2 N=" in proc.stdout


def test_w2_bench_reports_the_solvers_side_by_side(tmp_path):
    """bench_w2 at a small N: every solver's row, values equal to emd2's, the certified solver's pricing
    cost and a peak memory from a fresh process (the dense solver's above the sparse one's)."""
    out = tmp_path / "w2.nc"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_w2.py"),
            "--sizes",
            "1024",
            "--kinds",
            "perturbed",
            "departed",
            "--repeats",
            "1",
            "--memory",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = netcdf.read_netcdf(out, "bench")
    solvers = ds["solver"].values.tolist()
    expected = ["emd2", "emd2_lazy", "emd2_lazy_warm"] + ["ortools"] * HAS_ORTOOLS + ["w2_exact"]
    assert sorted(set(solvers)) == expected
    rel = ds["rel_diff"].values
    assert np.isfinite(rel).sum() == len(solvers)
    # the independent truth (integer costs) is held to its rounding bound and its flag, below
    assert np.all(rel[ds["solver"].values != "ortools"] <= 1e-9)
    new = ds.where(ds["solver"] == "w2_exact", drop=True)
    dense = ds.where(ds["solver"] == "emd2", drop=True)
    assert np.all(new["pricing_ns"].values > 0) and np.all(new["gap"].values <= 1e-11)
    assert np.all(dense["peak_mb"].values > new["peak_mb"].values)
    assert "speed-up" in proc.stdout
    if HAS_ORTOOLS:
        truth = ds.where(ds["solver"] == "ortools", drop=True)
        assert np.all(truth["truth_flag"].values == 0)
        assert np.all(truth["truth_diff"].values <= truth["truth_tol"].values)
        assert "2 of 2 solves agree" in proc.stdout
    else:
        assert "ortools not installed" in proc.stdout


@pytest.mark.skipif(not HAS_ORTOOLS, reason="ortools (the independent truth) is not installed")
def test_w2_bench_independent_truth_agrees_at_tiny_n(tmp_path):
    """bench_w2's ortools column at N = 128 on the cloud pairs that must agree (w2_exact certified, the
    truth exact for the rounded costs): flag 0, difference within the rounding bound + gap_bound, and the
    bound itself of the order 1/S (S from OR-tools' overflow budget)."""
    out = tmp_path / "w2.nc"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_w2.py"),
            "--sizes",
            "128",
            "--kinds",
            "perturbed",
            "clusters",
            "departed",
            "--repeats",
            "1",
            "--lazy-max",
            "0",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = netcdf.read_netcdf(out, "bench")
    truth = ds.where(ds["solver"] == "ortools", drop=True)
    assert truth.sizes["row"] == 3
    assert np.all(truth["truth_flag"].values == 0)
    assert np.all(truth["truth_diff"].values <= truth["truth_tol"].values)
    assert np.all((truth["truth_bound"].values > 0) & (truth["truth_bound"].values < 1e-10))
    assert "3 of 3 solves agree" in proc.stdout and "DISAGREE" not in proc.stdout


def test_w2_bench_runs_without_the_independent_truth(tmp_path):
    """With ortools not importable the benchmark still runs, and its column says so."""
    out = tmp_path / "w2.nc"
    argv = ["bench_w2.py", "--sizes", "64", "--kinds", "perturbed", "--repeats", "1", "--out", str(out)]
    code = (
        f"import runpy, sys; sys.modules['ortools'] = None; sys.argv = {argv!r}; "
        f"runpy.run_path({str(ROOT / 'benchmarks' / 'bench_w2.py')!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ortools not installed" in proc.stdout
    assert "ortools" not in netcdf.read_netcdf(out, "bench")["solver"].values.tolist()


def test_truth_rounding_bound_and_flag():
    """w2_ortools against brute force over all 7! assignments: its plan's W2² lies in [W2², W2² + bound]
    (on the sphere and on a cloud of size 1e-4, where S is 10^8 times larger); truth_check passes a
    value within gap_bound and flags one beyond bound + gap_bound."""
    bench = _bench_w2_module()
    if not HAS_ORTOOLS:
        pytest.skip("ortools (the independent truth) is not installed")
    rng = np.random.default_rng(3)
    for scale in (1.0, 1e-4):
        X, Y = (scale * P / np.linalg.norm(P, axis=1, keepdims=True) for P in rng.standard_normal((2, 7, 3)))
        C = ((X[:, None] - Y[None]) ** 2).sum(-1)
        opt = min(C[np.arange(7), list(p)].mean() for p in itertools.permutations(range(7)))
        value, bound, S = bench.w2_ortools(X, Y)
        assert 0 < bound < 1e-11 * scale**2 and S > 1e11 / scale**2
        assert opt - 1e-15 * opt <= value**2 <= opt + bound
        diff, tol, flag = bench.truth_check(np.sqrt(opt), 0.0, value, bound)
        assert flag == 0 and diff <= tol
        assert bench.truth_check(np.sqrt(opt + 4 * bound), bound, value, bound)[2] == 1
        assert bench.truth_check(np.sqrt(opt + 4 * bound), 0.0, value, bound)[2] == 1
        assert bench.truth_check(np.sqrt(opt + 0.5 * bound), bound, value, bound)[2] == 0


def test_ess_scaling_measures_the_growth_with_n(tmp_path):
    """ess_scaling runs the particle-number study at several N and reports the median ESS per N. On the
    spread initial cloud (uniform on S², t = 0) the ESS grows like N (the softmax weights a fixed
    fraction of the tokens), so doubling N doubles it to within sampling noise: the measurement can show
    the premise where it holds. The W2 curves start at the same value for every N (same ρ0, W2 to Π_# ρ0
    from the run's own tokens) only to sampling accuracy, so only finiteness is asserted on them."""
    out = tmp_path / "ess.nc"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "studies" / "ess_scaling.py"),
            str(ROOT / "config" / "test.yaml"),
            "--experiment",
            "tiny",
            "--beta",
            "10",
            "--tokens",
            "128",
            "256",
            "512",
            "1024",
            "--horizon",
            "1.0",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = netcdf.read_netcdf(out, "bench")
    ess0 = ds["ess_median"].isel(time=0).mean("replica").values
    np.testing.assert_allclose(ess0[1:] / ess0[:-1], 2.0, rtol=0.15)
    assert np.all(np.isfinite(ds["w2"].values))
    assert "min ESS" in proc.stdout and "1024" in proc.stdout and "departure per doubling of N" in proc.stdout


def test_job_share_sums_the_runs_benchmark_files(tmp_path):
    """The exact-W2 share of a run's job time, from Snakemake's benchmark files (two repeats summed)."""
    share = _bench_w2_module().job_share
    assert "no finished run" in share(str(tmp_path))
    bench = tmp_path / "exp" / "benchmarks"
    bench.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\n"
    (bench / "distances_beta10.tsv").write_text(header + "30.0\t0:00:30\t1\n10.0\t0:00:10\t1\n")
    (bench / "finite_temperature_beta10.tsv").write_text(header + "50.0\t0:00:50\t1\n")
    (bench / "distances.tsv").write_text(header + "10.0\t0:00:10\t1\n")
    assert "distances_beta 40 s of 100 s = 40 %" in share(str(tmp_path))


def test_mean_field_departure_runs_on_a_tiny_circle(tmp_path):
    """studies/mean_field_departure.py end to end on a tiny copy of config/mean_field_circle.yaml: the reference's
    distance to E1(A) and the particles' come back, the particle error falls from N = 64 to 256 on average."""
    import yaml

    cfg = yaml.safe_load((ROOT / "config" / "mean_field_circle.yaml").read_text())
    exp = cfg["experiments"]["mean_field_circle"]
    exp.update(betas=[10, 100], tokens=256)
    exp["time"] = {"horizon": 2.0, "dt": 0.05, "snapshots": 4}
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out, markdown = tmp_path / "mf.nc", tmp_path / "mf.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "studies" / "mean_field_departure.py"),
            str(config),
            "--tokens",
            "64",
            "256",
            "--replicas",
            "2",
            "--w2-every",
            "1",
            "--out",
            str(out),
            "--markdown",
            str(markdown),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = netcdf.read_netcdf(out, "bench")
    mf = ds["mf_dist_leading_A"].values
    assert np.all(np.isfinite(mf)) and np.all(np.diff(mf, axis=-1) < 0)  # both β still approach E1(A) by t = 2
    err = ds["particle_error_w2"].values  # (beta, tokens, replica, time)
    assert np.all(err[..., 0] < 1e-12)  # the same initial tokens
    assert np.all(err[:, 0, :, -1].mean(axis=-1) > err[:, 1, :, -1].mean(axis=-1))
    assert "| 10 |" in markdown.read_text()


def test_integrator_bench_reports_every_scheme_against_the_reference(tmp_path):
    """bench_integrators at a small N: a row per scheme and β, RK4's evaluations exactly 4 per step,
    the adaptive ones at least one step per snapshot interval, and every W2 error finite and, at β = 10,
    far below the sampling scale N^(-1/2)."""
    out, md = tmp_path / "integrators.nc", tmp_path / "integrators.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_integrators.py"),
            "--tokens",
            "32",
            "--betas",
            "10",
            "--refine",
            "2",
            "--out",
            str(out),
            "--markdown",
            str(md),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = netcdf.read_netcdf(out, "bench")
    runs = ds["run"].values.tolist()
    assert runs == ["rk4", "euler", "dopri5 tol x1", "dopri5 tol x10", "bs3 tol x1", "bs3 tol x10"]
    row = ds.sel(beta=10.0)
    assert float(row["evaluations"].sel(run="rk4")) == 4 * 400  # horizon 20 at dt = 0.05
    assert float(row["evaluations"].sel(run="euler")) == 400
    for run in runs[2:]:
        assert float(row["accepted"].sel(run=run)) >= 80  # one landing step per snapshot interval at least
    assert np.all(np.isfinite(row["w2_error"].values)) and float(row["w2_error"].sel(run="dopri5 tol x1")) < 1e-3
    assert md.read_text().count("\n| 10 |") == len(runs)


def test_meanfield_bench_solves_both_rules_to_the_same_tokens(tmp_path):
    """bench_meanfield on the tiny mean-field experiment: one row per β, the two rules' tokens within 1e-10 (the
    fast rule changes no mean by more than 1e-13), and a time ratio that is a positive number."""
    out = tmp_path / "mf.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_meanfield.py"),
            "--config",
            str(ROOT / "config" / "test.yaml"),
            "--horizon",
            "0.5",
            "--markdown",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if line.startswith("| tiny")]
    assert rows, out.read_text()
    for row in rows:
        ratio, distance = float(row[5]), float(row[6])
        assert ratio > 0 and distance <= 1e-10, row


def test_meanfield_bench_takes_the_one_dimensional_experiments_of_both_configs_only():
    """`make bench` runs bench_meanfield on the default run's and `make extensions`' experiments: it takes the
    circle and the axisymmetric sphere and leaves out the S² mesh's experiment (its reduction raises)."""
    bench = script_module("benchmarks/bench_meanfield.py")
    chosen = set()
    for path in ("config/config.yaml", "config/extensions.yaml"):
        cfg = schema.load_config_file(ROOT / path)
        schema.check_schema(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
        chosen |= {n for n, e in cfg["experiments"].items() if bench.one_dimensional(n, e, cfg["root_seed"])}
    assert chosen == {"mean_field_circle", "mean_field_sphere"}


def test_w2_snapshot_page_states_each_speed_up_against_its_definition(tmp_path):
    """`make w2-snapshots` end to end at N = 200 (two runs, one snapshot in four): the clouds come from the pipeline's
    stages, and every number on the page is what the benchmark's own file says: speed-up = emd2 seconds / w2_exact
    seconds per snapshot, the smallest of them, the count below 10×, |ΔW2²| between the two values."""
    clouds = tmp_path / "clouds"
    gen = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "w2_snapshot_clouds.py"), "--tokens", "200", "--out", str(clouds)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert gen.returncode == 0, gen.stderr[-3000:]
    pair = [str(clouds / "N200" / "beta100.nc"), str(clouds / "N200" / "zero_temperature.nc")]
    page, out = tmp_path / "w2_snapshots.md", tmp_path / "w2.nc"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_w2.py"), "--lazy-max", "0", "--truth-max", "0"]
        + ["--repeats", "1", "--every", "20", "20", "--snapshots", *pair, "--snapshots", *pair]
        + ["--markdown", str(page), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = netcdf.read_netcdf(out, "bench")
    text = page.read_text()
    assert text.count("## N = 200") == 2
    sections = text.split("## N = 200")[1:]
    speeds = []
    for run in (0, 1):
        rows = ds.where(ds["run"] == run, drop=True)
        new = rows.where(rows["solver"] == "w2_exact", drop=True)
        emd = rows.where(rows["solver"] == "emd2", drop=True)
        assert new["case"].values.tolist() == ["t=0", "t=5", "t=10", "t=15", "t=20"]
        speeds += (emd["seconds"].values / new["seconds"].values).tolist()
        for case, a, b, s in zip(new["case"].values, new["value"].values, emd["value"].values, speeds[-5:]):
            line = next(x for x in sections[run].splitlines() if x.startswith(f"| {case} |"))
            assert f"| {s:.1f}× |" in line and f"| {abs(a * a - b * b):.1e}" in line, line
    smallest = [x for x in text.splitlines() if x.startswith("Smallest speed-up")]
    assert len(smallest) == 2
    for run, line in enumerate(smallest):
        mine = speeds[5 * run : 5 * run + 5]
        assert line.startswith(f"Smallest speed-up {min(mine):.1f}×")
        assert f"{sum(s < 10 for s in mine)} of 5 below 10×" in line
    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_w2.py"), "--markdown", str(tmp_path / "x.md")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "--markdown needs --snapshots" in bad.stderr
    assert not (tmp_path / "x.md").exists()
