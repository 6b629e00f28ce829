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
