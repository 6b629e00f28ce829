"""studies/gpu_paper_scale.py: the GPU run through the pipeline's own stages, and its report against a CPU run.

The run command needs PyTorch (on a CPU here: the same code path, on the device there); without it that test is
skipped, and `make test-torch` runs it with LOWTEMP_REQUIRE_TORCH=1. The report is tested without PyTorch, on a
"GPU run" made of a CPU run's own files.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml
from conftest import ROOT, script_module
from scipy.optimize import linear_sum_assignment

from lowtemp.config import schema, validation
from lowtemp.dynamics import torch_field
from lowtemp.stages import initial_tokens, matrices, simulate
from lowtemp.store import datasets, netcdf

gpu = script_module("studies/gpu_paper_scale.py")
needs_torch = pytest.mark.skipif(
    not torch_field.available() and not os.environ.get("LOWTEMP_REQUIRE_TORCH"),
    reason="PyTorch (the optional gpu extra) is not installed",
)

NAME = "paper_scale"
#: the paper-scale experiment shrunk to seconds: the same matrices, measure and integrator
SMALL = {
    "experiments": {
        NAME: {
            "tokens": 64,
            "betas": [1000],
            "time": {"horizon": 1.0, "snapshots": 4},
            "distances": {"exact_every": 2},
            "convergence": {
                "beta": 1000,
                "steps": {"tokens": 32},
                "particles": {"tokens": [8, 16, 32, 64], "replicas": 4},
            },
            "figures": {"snapshot_times": [0.0, 0.5, 1.0]},
        }
    }
}


def _configs(tmp_path, root_seed=None):
    small = dict(SMALL, root_seed=root_seed) if root_seed is not None else SMALL
    path = tmp_path / f"small{root_seed or ''}.yaml"
    path.write_text(yaml.safe_dump(small))
    return [str(ROOT / "config" / "paper_scale.yaml"), str(path)]


def _cpu_run(tmp_path, configs, folder):
    """A CPU run's results folder as the pipeline writes it (the stages with the config's kernel), with a
    Snakemake benchmark file for the finite-temperature job."""
    config = {}
    for path in configs:
        config = gpu.merged(config, schema.load_config_file(path))
    validation.validate_config(config, gpu.SCHEMA, results=str(tmp_path / "unused"))
    exp, seed = config["experiments"][NAME], config["root_seed"]
    out = folder / NAME
    (out / "finite_temperature").mkdir(parents=True)
    (out / "benchmarks").mkdir()
    matrices.stage_matrices(NAME, exp, seed, out / "matrices.nc")
    initial_tokens.stage_initial_tokens(NAME, exp, seed, out / "matrices.nc", out / "initial_tokens.nc")
    inputs = (out / "matrices.nc", out / "initial_tokens.nc")
    simulate.stage_finite_temperature(NAME, exp, seed, 1000.0, *inputs, out / "finite_temperature" / "beta1000.nc")
    simulate.stage_zero_temperature(NAME, exp, seed, *inputs, out / "zero_temperature.nc")
    (out / "benchmarks" / "finite_temperature_beta1000.tsv").write_text("s\th:m:s\tmax_rss\n2.5\t0:00:02\t100\n")
    return folder


def _agreement(text):
    """The agreement table's rows: (t, W2 GPU-CPU, W2 CPU replicas, W2 GPU to zero, W2 CPU to zero)."""
    rows = [line for line in text.split("## The same dynamics?")[1].splitlines() if line.startswith("| ")][1:]
    return np.array([[np.nan if c == "n/a" else float(c) for c in row.strip("| ").split(" | ")] for row in rows])


def _report(device, results, tmp_path):
    """The page the report command writes."""
    page = tmp_path / "page.md"
    gpu.main(["report", str(device), "--results", str(results), "--markdown", str(page)])
    return page.read_text()


#: the fake GPU folder's kernel times (s): torch, dense on all cores, dense on 2 threads, cap
SECONDS = {("torch", None): 0.01, ("dense", None): 0.2, ("dense", 2): 1.0, ("cap", None): 0.5}
#: the fake GPU run's replica 0 after t = 0: the CPU run's shifted by this vector (W2 between them is its length)
SHIFT = np.array([3e-3, -4e-3, 0.0])


def _fake_gpu_folder(results, folder, summary_extra=None, npz_extra=None):
    """A GPU run's folder whose replica 0 is the CPU run's at t = 0 and the CPU run's shifted by SHIFT after it."""
    ds = netcdf.read_netcdf(results / NAME / "finite_temperature" / "beta1000.nc", "finite_temperature")
    X0 = datasets.load_initial_tokens(results / NAME / "initial_tokens.nc")
    exact = np.arange(ds.sizes["time"]) % 2 == 0
    positions = ds["positions"].values[0, exact].copy()
    positions[1:] += SHIFT
    folder.mkdir()
    meta = dict(
        beta=1000.0,
        integrator=ds.attrs["integrator"],
        tolerance=float(ds.attrs["tolerance"]),
        initial_tokens_sha256=gpu._tokens_digest(X0),
    )
    np.savez(
        folder / "replica0.npz", times=ds["time"].values[exact], positions=positions, **{**meta, **(npz_extra or {})}
    )
    r, n = X0.shape[:2]
    kernels = [
        {
            "kernel": k,
            "device": "cuda" if k == "torch" else "cpu",
            "threads": None if k == "torch" else (t or 16),
            "asked": t,
            "seconds": sec,
            "ns_per_pair": sec / (r * n * n) * 1e9,
        }
        for (k, t), sec in SECONDS.items()
    ]
    summary = {
        "experiment": NAME,
        "beta": 1000.0,
        "commit": "abc1234",
        "machine": {"cpu": "x", "cpu_threads": 16, "python": "3", "numpy": "2", "numba": "0", "torch": "2"},
        "initial_tokens_sha256": gpu._tokens_digest(X0),
        "clouds": [{"cloud": "t = 0", "kernels": kernels, "torch_vs_dense_relative": 1e-15}],
        "run": {
            "kernel": "torch",
            "integrator": "dopri5",
            "tolerance": 1e-4,
            "stage_seconds": 1.0,
            "field_evaluations": int(ds["field_evaluations"].sum()),
            "accepted_steps": int(ds["accepted_steps"].sum()),
            "rejected_steps": 0,
            "seconds_per_evaluation": 0.01,
        },
        **(summary_extra or {}),
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def _naive_w2(X, Y):
    """W2 by SciPy's assignment on costs computed by differences: a solver sharing no code with transport.w2."""
    C = np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=-1)
    rows, cols = linear_sum_assignment(C)
    return float(np.sqrt(C[rows, cols].mean()))


def test_the_report_holds_each_number_to_its_definition(tmp_path):
    """The kernel table's ms, ns per pair and speed-ups, the CPU row's ms per evaluation, and the comparison: W2
    between the runs is the shift's length where the GPU run is the CPU run shifted (0 at t = 0), and W2 to the
    zero-temperature measure agrees with SciPy's assignment on costs by differences."""
    results = _cpu_run(tmp_path, _configs(tmp_path), tmp_path / "results")
    text = _report(_fake_gpu_folder(results, tmp_path / "gpu"), results, tmp_path)
    pairs = 4 * 64 * 64
    cells = [f"{sec * 1e3:.1f} ({sec / pairs * 1e9:.3f})" for sec in SECONDS.values()]
    assert f"| t = 0 | {' | '.join(cells)} | 20.0x, 100.0x | 1.0e-15 |" in text
    ds = netcdf.read_netcdf(results / NAME / "finite_temperature" / "beta1000.nc", "finite_temperature")
    per_evaluation = 2.5 / (int(ds["field_evaluations"].sum()) + ds.sizes["time"]) * 1e3
    assert f"| 2.5 | {2.5 / int(ds['accepted_steps'].sum()):.3f} | {per_evaluation:.1f} |" in text
    table = _agreement(text)
    assert table.shape == (3, 5) and table[0, 1] == 0.0
    np.testing.assert_allclose(table[1:, 1], np.linalg.norm(SHIFT), rtol=2e-3)  # the table prints 4 digits
    assert np.all(table[:, 2] > 1e-2)  # two independent samples of the same measure
    zero = netcdf.read_netcdf(results / NAME / "zero_temperature.nc", "zero_temperature")
    G = np.load(tmp_path / "gpu" / "replica0.npz")["positions"]
    for row, k, g in zip(table, (0, 2, 4), G):
        Z0 = zero["positions"].values[0, k]
        np.testing.assert_allclose(row[3], _naive_w2(g, Z0), rtol=2e-3, atol=1e-12)
        np.testing.assert_allclose(row[4], _naive_w2(ds["positions"].values[0, k], Z0), rtol=2e-3, atol=1e-12)
    assert "the same β, integrator, tolerance, snapshot times and initial cloud" in text


@pytest.mark.parametrize(
    "npz_extra, shift_times, reason",
    [
        ({"beta": 100.0}, 0.0, "beta 100.0 against the CPU run's 1000"),
        ({"integrator": "bs3"}, 0.0, "integrator bs3 against the CPU run's dopri5"),
        ({"tolerance": 1e-3}, 0.0, "tolerance 0.001 against"),
        ({}, 0.1, "not the same time grid"),
        ({"t0": 1e-12}, 0.0, "other tokens"),
    ],
)
def test_the_report_refuses_to_compare_what_differs(tmp_path, npz_extra, shift_times, reason):
    """A GPU run at another β, integrator, tolerance or time grid, or from another initial cloud (its npz's t = 0
    snapshot moved by 1e-12), is not compared, whatever its summary.json says."""
    results = _cpu_run(tmp_path, _configs(tmp_path), tmp_path / "results")
    extra = {k: v for k, v in npz_extra.items() if k != "t0"}
    folder = _fake_gpu_folder(results, tmp_path / "gpu", npz_extra=extra)
    data = dict(np.load(folder / "replica0.npz"))
    data["times"] = data["times"] + shift_times
    data["positions"][0, 0, 0] += npz_extra.get("t0", 0.0)
    np.savez(folder / "replica0.npz", **data)
    text = _report(folder, results, tmp_path)
    assert "β = 1000: not compared: " in text and reason in text and "W2(GPU replica 0" not in text


def test_the_report_without_metadata_benchmark_file_or_zero_temperature(tmp_path):
    """An npz without β and settings (an older script's) is not compared; without the CPU job's benchmark file its
    row says so; without zero_temperature.nc the last two columns are n/a; two commits get a header line each."""
    results = _cpu_run(tmp_path, _configs(tmp_path), tmp_path / "results")
    old = _fake_gpu_folder(results, tmp_path / "old")
    data = dict(np.load(old / "replica0.npz"))
    np.savez(old / "replica0.npz", times=data["times"], positions=data["positions"])
    assert "records no beta, integrator or tolerance" in _report(old, results, tmp_path)
    (results / NAME / "benchmarks" / "finite_temperature_beta1000.tsv").unlink()
    (results / NAME / "zero_temperature.nc").unlink()
    text = _report(_fake_gpu_folder(results, tmp_path / "new"), results, tmp_path)
    assert "(no benchmark file)" in text and "last two are n/a" in text
    assert np.all(np.isnan(_agreement(text)[:, 3:]))
    other = _fake_gpu_folder(results, tmp_path / "b100", {"beta": 100.0, "commit": "def5678"})
    page = tmp_path / "page.md"
    gpu.main(["report", str(tmp_path / "new"), str(other), "--results", str(results), "--markdown", str(page)])
    header = page.read_text().split("## One field")[0]
    assert "β = 100: commit def5678" in header and "β = 1000: commit abc1234" in header


@needs_torch
def test_the_torch_run_is_the_cpu_run_to_rounding(tmp_path):
    """`run` with PyTorch (on the CPU here) through the pipeline's stages against the dense CPU run of the same
    config: compared (same β, settings, times, initial cloud), W2 between the two runs' replica 0 at rounding level
    (1e-10) at every exact snapshot, far below the sampling scale, every cloud's torch field within 1e-12 of the dense
    one. Against the CPU run of another root seed: not compared (other tokens)."""
    configs = _configs(tmp_path)
    out = tmp_path / "gpu"
    gpu.main(["run", *configs, "--beta", "1000", "--out", str(out), "--work", str(tmp_path / "work"), "--times", "1"])
    summary = json.loads((out / "summary.json").read_text())
    assert [c["cloud"] for c in summary["clouds"]] == ["t = 0", "t = 1"]
    assert all(c["torch_vs_dense_relative"] < 1e-12 for c in summary["clouds"])
    for cloud in summary["clouds"]:
        assert cloud["pairs"] == 4 * 64 * 64
        for k in cloud["kernels"]:
            assert k["ns_per_pair"] == pytest.approx(k["seconds"] / cloud["pairs"] * 1e9, rel=1e-12)
    assert summary["run"]["kernel"] == "torch" and summary["run"]["field_evaluations"] > 0
    results = _cpu_run(tmp_path, configs, tmp_path / "results")
    table = _agreement(_report(out, results, tmp_path))
    assert np.all(table[:, 1] < 1e-10) and np.all(table[1:, 2] > 1e-2)
    np.testing.assert_allclose(table[:, 3], table[:, 4], atol=1e-10)
    other = _cpu_run(tmp_path, _configs(tmp_path, root_seed=7), tmp_path / "other")
    assert "not compared: " in (text := _report(out, other, tmp_path)) and "other tokens" in text
