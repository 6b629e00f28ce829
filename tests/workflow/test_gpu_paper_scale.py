"""benchmarks/gpu_paper_scale.py: the GPU run through the pipeline's own stages, and its report against a CPU run.

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
from conftest import ROOT, benchmark_module

from lowtemp.config import validation
from lowtemp.dynamics import torch_field
from lowtemp.stages import initial_tokens, matrices, simulate
from lowtemp.store import datasets, io

gpu = benchmark_module("gpu_paper_scale")
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
        config = gpu.merged(config, validation.load_config_file(path))
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
    return np.array([[float(c) for c in row.strip("| ").split(" | ")] for row in rows])


def _report(device, results, tmp_path):
    """The page the report command writes."""
    page = tmp_path / "page.md"
    gpu.main(["report", str(device), "--results", str(results), "--markdown", str(page)])
    return page.read_text()


def _fake_gpu_folder(results, folder, summary_extra=None):
    """A GPU run's folder holding the CPU run's own replica 0 (what a run on the same machine would write)."""
    ds = io.read_netcdf(results / NAME / "finite_temperature" / "beta1000.nc", "finite_temperature")
    X0 = datasets.load_initial_tokens(results / NAME / "initial_tokens.nc")
    exact = np.arange(ds.sizes["time"]) % 2 == 0
    folder.mkdir()
    np.savez(folder / "replica0.npz", times=ds["time"].values[exact], positions=ds["positions"].values[0, exact])
    kernel = {"kernel": "torch", "device": "cuda", "threads": None, "asked": None, "seconds": 0.01, "ns_per_pair": 1}
    cpu = [dict(kernel, kernel=k, device="cpu", threads=t or 16, asked=t) for k, t in gpu.CPU_KERNELS]
    summary = {
        "experiment": NAME,
        "beta": 1000.0,
        "commit": "abc1234",
        "machine": {"cpu": "x", "cpu_threads": 16, "python": "3", "numpy": "2", "numba": "0", "torch": "2"},
        "initial_tokens_sha256": gpu._tokens_digest(X0),
        "clouds": [{"cloud": "t = 0", "kernels": [kernel, *cpu], "torch_vs_dense_relative": 1e-15}],
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


def test_the_report_compares_the_runs_as_measures_and_refuses_another_grid(tmp_path):
    """The same clouds on both sides: W2 between them 0 at every exact snapshot while two replicas differ, the two
    W2 to the zero-temperature measure equal, the tokens identical. A GPU run from other initial tokens is reported
    as such ("NO"), and one on another time grid is refused."""
    results = _cpu_run(tmp_path, _configs(tmp_path), tmp_path / "results")
    text = _report(_fake_gpu_folder(results, tmp_path / "same"), results, tmp_path)
    table = _agreement(text)
    assert table.shape == (3, 5) and np.all(table[:, 1] == 0.0)
    assert np.all(table[:, 2] > 1e-2)  # two independent samples of the same measure
    np.testing.assert_array_equal(table[:, 3], table[:, 4])
    assert "identical (sha256 of their float64 bytes): yes" in text
    assert "| 1000 | GPU machine | torch |" in text and "| 1000 | this machine" in text
    other = _fake_gpu_folder(results, tmp_path / "other", {"initial_tokens_sha256": "0" * 64})
    assert "identical (sha256 of their float64 bytes): NO" in _report(other, results, tmp_path)
    shifted = _fake_gpu_folder(results, tmp_path / "shifted")
    data = dict(np.load(shifted / "replica0.npz"))
    np.savez(shifted / "replica0.npz", times=data["times"] + 0.1, positions=data["positions"])
    with pytest.raises(SystemExit, match="not the same time grid"):
        _report(shifted, results, tmp_path)


@needs_torch
def test_the_torch_run_is_the_cpu_run_to_rounding(tmp_path):
    """`run` with PyTorch (on the CPU here) through the pipeline's stages against the dense CPU run of the same
    config: the same initial tokens, W2 between the two runs' replica 0 at rounding level (1e-10) at every exact
    snapshot, far below the sampling scale, every cloud's torch field within 1e-12 of the dense one. The CPU run
    of another root seed is told apart: other tokens, W2 at the sampling scale from t = 0."""
    configs = _configs(tmp_path)
    out = tmp_path / "gpu"
    gpu.main(["run", *configs, "--beta", "1000", "--out", str(out), "--work", str(tmp_path / "work"), "--times", "1"])
    summary = json.loads((out / "summary.json").read_text())
    assert [c["cloud"] for c in summary["clouds"]] == ["t = 0", "t = 1"]
    assert all(c["torch_vs_dense_relative"] < 1e-12 for c in summary["clouds"])
    assert summary["run"]["kernel"] == "torch" and summary["run"]["field_evaluations"] > 0
    results = _cpu_run(tmp_path, configs, tmp_path / "results")
    table = _agreement(_report(out, results, tmp_path))
    assert np.all(table[:, 1] < 1e-10) and np.all(table[1:, 2] > 1e-2)
    np.testing.assert_allclose(table[:, 3], table[:, 4], atol=1e-10)
    other = _cpu_run(tmp_path, _configs(tmp_path, root_seed=7), tmp_path / "other")
    text = _report(out, other, tmp_path)
    assert "identical (sha256 of their float64 bytes): NO" in text and _agreement(text)[0, 1] > 1e-2
