"""Shared fixtures and independent reference implementations for the lowtemp test suite.

Reference implementations here are deliberately naive (plain Python loops, no
vectorisation, no shared code with the package) so that the package is checked
against an independent computation, not against itself.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from lowtemp.config import experiment as lowtemp_experiment
from lowtemp.config import schema
from lowtemp.model import matrices, seeding

ROOT = Path(__file__).resolve().parents[1]
SNAKEFILE = ROOT / "Snakefile"
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
TEST_CONFIG = ROOT / "config" / "test.yaml"
#: the snakemake executable of the interpreter running the tests (the project's venv)
SNAKEMAKE = Path(sys.executable).parent / "snakemake"

#: Spectrum and conditioning used throughout (the tiny config's spectral family).
EIGENVALUES_OF_A = [1.5, 0.5, 0.25]
SIGMA_MIN, SIGMA_MAX = 0.8, 1.25


def script_module(path: str):
    """A script of benchmarks/, studies/ or reports/ (``path`` from the repository root, e.g.
    ``"reports/paper_scale_report.py"``) imported as a module (registered, so its dataclasses resolve their
    annotations), with its folder on the path as when it runs as a script (sphere_report imports paper_scale_report
    beside it; the shared harness is ``lowtemp.store.harness``)."""
    script = ROOT / path
    if str(script.parent) not in sys.path:
        sys.path.insert(0, str(script.parent))
    spec = importlib.util.spec_from_file_location(script.stem, script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def spectral_matrices(seed: int = 0, d: int = 3, eigenvalues=None) -> matrices.AttentionMatrices:
    """Matrices of the ``spectral`` family (d = 3 by default) from a seeded stream."""
    if eigenvalues is None:
        eigenvalues = EIGENVALUES_OF_A if d == 3 else list(np.linspace(1.5, 0.25, d))
    rng = seeding.generator(seed, "tests", "matrices", str(d))
    return matrices.generate_matrices(
        "spectral", d, rng, eigenvalues=eigenvalues, sigma_min=SIGMA_MIN, sigma_max=SIGMA_MAX
    )


@pytest.fixture(scope="session")
def M3() -> matrices.AttentionMatrices:
    return spectral_matrices(0, 3)


def random_unit(rng: np.random.Generator, *shape_and_dim: int) -> np.ndarray:
    """Uniform points on the sphere (independent of lowtemp.model.measures)."""
    g = rng.standard_normal(shape_and_dim)
    return g / np.linalg.norm(g, axis=-1, keepdims=True)


# ------------------------------------------------------------------ naive references
def naive_attention_field(X: np.ndarray, B: np.ndarray, V: np.ndarray, beta: float) -> np.ndarray:
    """Plain double loop over tokens: P⊥(x_i) Σ_j softmax_j(β x_iᵀBx_j) V x_j."""
    X = np.asarray(X, dtype=float)
    R, N, _ = X.shape
    out = np.zeros_like(X)
    for r in range(R):
        for i in range(N):
            xi = X[r, i]
            scores = np.array([beta * float(xi @ B @ X[r, j]) for j in range(N)])
            w = np.exp(scores - scores.max())
            w /= w.sum()
            v = np.zeros_like(xi)
            for j in range(N):
                v += w[j] * (V @ X[r, j])
            out[r, i] = v - float(v @ xi) * xi
    return out


def naive_ess(X: np.ndarray, B: np.ndarray, beta: float) -> np.ndarray:
    R, N, _ = X.shape
    out = np.zeros((R, N))
    for r in range(R):
        for i in range(N):
            s = np.array([beta * float(X[r, i] @ B @ X[r, j]) for j in range(N)])
            w = np.exp(s - s.max())
            w /= w.sum()
            out[r, i] = 1.0 / np.sum(w**2)
    return out


def naive_zero_temperature_field(X: np.ndarray, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """P⊥(x) A x / |Bᵀx| token by token."""
    out = np.zeros_like(X)
    for idx in np.ndindex(X.shape[:-1]):
        x = X[idx]
        f = A @ x / np.linalg.norm(B.T @ x)
        out[idx] = f - (f @ x) * x
    return out


# ------------------------------------------------------------------ the workflow
def run_workflow(workdir: Path, cores: int = 2) -> subprocess.CompletedProcess:
    """config/test.yaml through Snakemake in ``workdir`` (``--directory``: nothing lands in the repository)."""
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            str(SNAKEMAKE),
            "--snakefile",
            str(SNAKEFILE),
            "--directory",
            str(workdir),
            "--configfile",
            str(TEST_CONFIG),
            "--cores",
            str(cores),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc


@pytest.fixture(scope="session")
def completed_test_run(tmp_path_factory) -> Path:
    """The working directory of one complete run of config/test.yaml (about a minute on 2 cores),
    shared by the tests that read its results (test_e2e) or dry-run edits against it (test_rerun).
    Tests must not change it."""
    work = tmp_path_factory.mktemp("e2e")
    run_workflow(work)
    return work


# ------------------------------------------------------------------ configs
@pytest.fixture
def test_config() -> dict:
    """A fresh (deep) copy of config/test.yaml, not yet validated."""
    with open(TEST_CONFIG) as fh:
        return copy.deepcopy(yaml.safe_load(fh))


def validated(config: dict) -> dict:
    """Validate against the schema (fills defaults in place, as the workflow does) and return the config."""
    schema.check_schema(config, SCHEMA)
    return config


def resource_experiment(**changes) -> dict:
    """A validated experiment (d = 3, spectral family, N = 4096, R = 4) with some keys changed: the
    resource model's tests size their jobs on it."""
    exp = {
        "dim": 3,
        "tokens": 4096,
        "replicas": 4,
        "betas": [10, 100, 1000],
        "matrices": {"family": "spectral", "eigenvalues": [1.5, 0.5, 0.25], "sigma_min": 0.8, "sigma_max": 1.25},
        "time": {"horizon": 20.0, "dt": 0.05, "snapshots": 80},
    }
    exp.update(changes)
    return validated({"experiments": {"e": exp}})["experiments"]["e"]


def experiment_matrices(exp):
    """K, Q, V of an experiment named "e" at root seed 1."""
    return lowtemp_experiment.build_matrices("e", exp, 1)


RULE_HEADER = re.compile(r"^(?P<indent>[ \t]*)(?:rule|checkpoint)[ \t]+(?P<name>\w+)[ \t]*:[ \t]*(?:#.*)?$")


def rule_blocks(text: str) -> dict[str, str]:
    """Every ``rule`` or ``checkpoint`` of a Snakemake file: its name and its body without comments (the lines
    indented deeper than its header, up to the next line that is not)."""
    blocks: dict[str, str] = {}
    name, indent, body = None, 0, []
    for line in text.splitlines() + ["<end>"]:
        code = line.split("#", 1)[0].rstrip() if not line.lstrip().startswith(("'", '"', "f'", 'f"')) else line
        header = RULE_HEADER.match(line)
        ends = code.strip() and (len(code) - len(code.lstrip())) <= indent
        if name is not None and (header or ends):
            blocks[name] = "\n".join(body)
            name = None
        if header:
            name, indent, body = header["name"], len(header["indent"].expandtabs()), []
        elif name is not None and code.strip():
            body.append(code)
    return blocks


def rule_script(body: str) -> str | None:
    """The path a rule body's ``script:`` directive names, or None."""
    m = re.search(r"^\s+script:\s*(?:\n\s*)?([\"'])(.+?)\1", body, flags=re.M)
    return m.group(2) if m else None
