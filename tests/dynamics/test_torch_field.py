"""The optional PyTorch field (kernel ``torch``) against the dense kernel and the numpy reference.

PyTorch is not part of `make test`'s environment: there these tests are skipped, except the
refusal of ``kernel: torch`` without it. `.ci/run` installs the CPU build and runs this file
with LOWTEMP_REQUIRE_TORCH=1, which turns the skip into a failure.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import subprocess

import numpy as np
import pytest
import yaml
from conftest import (
    SNAKEFILE,
    SNAKEMAKE,
    TEST_CONFIG,
    experiment_matrices,
    random_unit,
    resource_experiment,
    spectral_matrices,
    validated,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.config import resources, validation
from lowtemp.config.plan import ConfigError
from lowtemp.dynamics import fields as dynamics
from lowtemp.dynamics import integrate, kernels, torch_field

HAS_TORCH = torch_field.available()
needs_torch = pytest.mark.skipif(
    not HAS_TORCH and not os.environ.get("LOWTEMP_REQUIRE_TORCH"),
    reason="PyTorch (the optional gpu extra) is not installed",
)

#: the accuracy contract: the torch field equals the dense kernel to this relative error
RELATIVE = 1e-12


def _relative(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@needs_torch
@settings(max_examples=25, deadline=None)
@given(
    d=st.sampled_from([2, 3]),
    n=st.integers(2, 300),
    r=st.integers(1, 3),
    log_beta=st.floats(0.0, 3.0),
    seed=st.integers(0, 2**16),
)
def test_torch_field_equals_the_dense_kernel(d, n, r, log_beta, seed):
    """Field and ESS against the dense kernel and the numpy reference on random clouds, β = 1 … 1000,
    and through ``kernels.field_with_kernel``/``ess_with_kernel`` by name."""
    M = spectral_matrices(seed % 7, d=d)
    X = random_unit(np.random.default_rng(seed), r, n, d)
    beta = 10.0**log_beta
    F, ess = torch_field.torch_field(X, M.B, M.V, beta, with_ess=True, on="cpu")
    F_dense, ess_dense = kernels.dense_field(X, M.B, M.V, beta, with_ess=True)
    assert _relative(F, F_dense) <= RELATIVE
    assert _relative(F, dynamics.attention_field(X, M.B, M.V, beta)) <= RELATIVE
    assert _relative(ess, ess_dense) <= RELATIVE
    np.testing.assert_array_equal(
        kernels.field_with_kernel(X, M.B, M.V, beta, "torch"), torch_field.torch_field(X, M.B, M.V, beta)
    )


@needs_torch
def test_the_contract_would_catch_single_precision():
    """The violating input: the same field computed in float32 misses the 1e-12 contract by orders of
    magnitude, so the comparison above can fail."""
    M = spectral_matrices(3)
    X = random_unit(np.random.default_rng(3), 2, 200, 3)
    F32 = dynamics.attention_field(X.astype(np.float32), M.B.astype(np.float32), M.V.astype(np.float32), 100.0)
    assert _relative(F32.astype(float), kernels.dense_field(X, M.B, M.V, 100.0)) > 1e-8


@needs_torch
def test_a_run_with_the_torch_field_follows_the_dense_run():
    """DOPRI5 to t = 2 at β = 50: the two kernels' runs agree to far below the tolerance (their fields
    differ by rounding only, so the controller takes the same steps)."""
    M = spectral_matrices(3)
    X0 = random_unit(np.random.default_rng(4), 2, 64, 3)
    grid = integrate.TimeGrid(horizon=2.0, snapshots=8, dt=0.05)
    a, rec_a = integrate.simulate(
        lambda X: kernels.field_with_kernel(X, M.B, M.V, 50.0, "torch"), X0, grid, "dopri5", return_record=True
    )
    b, rec_b = integrate.simulate(
        lambda X: kernels.dense_field(X, M.B, M.V, 50.0), X0, grid, "dopri5", return_record=True
    )
    assert np.max(np.abs(a - b)) < 1e-10
    np.testing.assert_array_equal(rec_a.evaluations, rec_b.evaluations)


@needs_torch
def test_device_is_cuda_only_where_torch_sees_one():
    assert torch_field.device() == ("cuda" if torch_field.torch.cuda.is_available() else "cpu")


def test_kernel_torch_without_pytorch_is_refused_by_the_config_check(monkeypatch):
    """Before any job: the config check names the key and says how to install PyTorch."""
    with open(TEST_CONFIG) as fh:
        config = validated(yaml.safe_load(fh))
    exp = copy.deepcopy(config["experiments"]["tiny"])
    exp["kernel"] = "torch"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(
        ConfigError,
        match=r"experiments\.tiny\.kernel: 'torch' needs PyTorch, which is not "
        r"installed here: `\.venv/bin/pip install torch`",
    ):
        validation.validate_experiment("tiny", exp, config["root_seed"])
    monkeypatch.setattr(importlib.util, "find_spec", real)
    if importlib.util.find_spec("torch") is not None:
        validation.validate_experiment("tiny", exp, config["root_seed"])  # accepted where it is installed


def test_the_torch_kernel_without_pytorch_raises_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch_field, "torch", None)
    with pytest.raises(ModuleNotFoundError, match="kernel 'torch' needs PyTorch"):
        kernels.field_with_kernel(random_unit(np.random.default_rng(0), 1, 4, 3), np.eye(3), np.eye(3), 1.0, "torch")


def test_the_resource_model_budgets_the_torch_kernel_as_the_numpy_reference():
    """What it costs on a CPU (docs/kernels.md): the same budget as numpy, never a KeyError."""
    est = {
        k: resources.estimate(
            "finite_temperature",
            resource_experiment(kernel=k),
            beta=100.0,
            matrices=experiment_matrices(resource_experiment(kernel=k)),
            threads=2,
        )
        for k in ("numpy", "torch")
    }
    assert est["torch"].compute_seconds == pytest.approx(est["numpy"].compute_seconds)


def test_only_torch_field_jobs_ask_for_a_gpu():
    """resources.gpus: 1 for the stages that evaluate the field when the kernel is torch, else 0 (the
    SLURM plugin emits --gpus only for a non-zero gpu resource)."""
    torch_exp, dense_exp = resource_experiment(kernel="torch"), resource_experiment(kernel="dense")
    assert resources.gpus("finite_temperature", torch_exp) == resources.gpus("convergence", torch_exp) == 1
    assert resources.gpus("distances_beta", torch_exp) == resources.gpus("zero_temperature", torch_exp) == 0
    assert resources.gpus("finite_temperature", dense_exp) == 0


@needs_torch
def test_a_dry_run_with_kernel_torch_requests_a_gpu_for_the_field_jobs(tmp_path):
    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    cfg["experiments"] = {"tiny": cfg["experiments"]["tiny"]}
    cfg["experiments"]["tiny"]["kernel"] = "torch"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        [
            str(SNAKEMAKE),
            "--snakefile",
            str(SNAKEFILE),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "config.yaml"),
            "--cores",
            "2",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = re.split(r"\n(?=rule |localrule )", proc.stdout + proc.stderr)
    finite = [j for j in jobs if j.startswith("rule finite_temperature")]
    assert finite and all(re.search(r"\bgpu=1\b", j) for j in finite)
    assert all(not re.search(r"\bgpu=1\b", j) for j in jobs if not j.startswith("rule finite_temperature"))
