"""Smoke test of the benchmark script (`make bench`): it runs and writes its table.

No timing is asserted here (timings belong to the benchmark's printed ratios);
the accuracy column is, since it is a number the kernels must meet anywhere.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np

from lowtemp import io

ROOT = Path(__file__).resolve().parents[1]


def test_bench_quick_writes_table(tmp_path):
    out = tmp_path / "bench.nc"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_kernels.py"), "--quick",
                           "--repeats", "1", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = io.read_netcdf(out, "bench")
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
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_w2.py"), "--sizes", "1024",
                           "--kinds", "perturbed", "departed", "--repeats", "1", "--memory", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = io.read_netcdf(out, "bench")
    solvers = ds["solver"].values.tolist()
    assert sorted(set(solvers)) == ["emd2", "emd2_lazy", "emd2_lazy_warm", "w2_exact"]
    rel = ds["rel_diff"].values
    assert np.all(rel[np.isfinite(rel)] <= 1e-9) and np.isfinite(rel).sum() == len(solvers)
    new = ds.where(ds["solver"] == "w2_exact", drop=True)
    dense = ds.where(ds["solver"] == "emd2", drop=True)
    assert np.all(new["pricing_ns"].values > 0) and np.all(new["gap"].values <= 1e-11)
    assert np.all(dense["peak_mb"].values > new["peak_mb"].values)
    assert "speed-up" in proc.stdout


def test_ess_scaling_measures_the_growth_with_n(tmp_path):
    """ess_scaling runs the particle-number study at several N and reports the median ESS per N. On the
    spread initial cloud (uniform on S², t = 0) the ESS grows like N (the softmax weights a fixed
    fraction of the tokens), so doubling N doubles it to within sampling noise: the measurement can show
    the premise where it holds. The W2 curves start at the same value for every N (same ρ0, W2 to Π_# ρ0
    from the run's own tokens) only to sampling accuracy, so only finiteness is asserted on them."""
    out = tmp_path / "ess.nc"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ess_scaling.py"), str(ROOT / "config" / "test.yaml"),
                           "--experiment", "tiny", "--beta", "10", "--tokens", "128", "256", "512", "1024",
                           "--horizon", "1.0", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = io.read_netcdf(out, "bench")
    ess0 = ds["ess_median"].isel(time=0).mean("replica").values
    np.testing.assert_allclose(ess0[1:] / ess0[:-1], 2.0, rtol=0.15)
    assert np.all(np.isfinite(ds["w2"].values))
    assert "min ESS" in proc.stdout and "1024" in proc.stdout
