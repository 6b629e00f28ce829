"""The workflow read and linted as the Snakemake workflow catalog does: in an environment that holds Snakemake and
its own dependencies only.

The environment is a real venv (``python -m venv``) whose site-packages holds exactly the distributions of
Snakemake's requirement closure, linked from the venv running the tests (no download, the same pinned versions);
numpy, scipy, xarray and the rest of the package's dependencies are absent from it. There:

* ``snakemake --lint`` reads the workflow (the config check's structural half, ``lowtemp.config.schema``) and
  finds nothing;
* a bad config is still refused while the workflow is read, naming the key;
* building jobs (a dry run) fails with an error that names the missing package and what to install;
* and the guard is a guard: the same workflow with one numerical module imported at its top level fails to lint.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from packaging.requirements import Requirement

#: packages of the project that must not be importable in the catalog's environment
PACKAGE_DEPENDENCIES = ("numpy", "scipy", "xarray", "numba", "matplotlib")


def requirement_closure(root: str) -> set[str]:
    """The distributions ``root`` needs, itself included: its requirements without extras, recursively (markers
    evaluated for this interpreter)."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def top_level_entries(distribution: str) -> set[str]:
    """The first path components (packages, modules, ``.dist-info``, ``.pth``) of an installed distribution's files."""
    files = metadata.distribution(distribution).files or []
    return {Path(str(f)).parts[0] for f in files if not str(f).startswith("..") and Path(str(f)).parts}


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """The python of a venv holding Snakemake's requirement closure only."""
    venv = tmp_path_factory.mktemp("catalog") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    source = Path(metadata.distribution("snakemake").locate_file(""))
    for dist in sorted(requirement_closure("snakemake")):
        for entry in top_level_entries(dist):
            if (source / entry).exists() and not (site / entry).exists():
                (site / entry).symlink_to(source / entry)
    return python


def bare_snakemake(python: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_environment_holds_snakemake_and_none_of_the_package_dependencies(bare_python):
    probe = "import importlib.util as u, snakemake; print([m for m in {!r} if u.find_spec(m)])"
    proc = subprocess.run([str(bare_python), "-c", probe.format(PACKAGE_DEPENDENCIES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/test.yaml", "config/demo.yaml"])
def test_snakemake_lint_finds_nothing_with_snakemake_alone(bare_python, configfile):
    proc = bare_snakemake(bare_python, "--lint", "--configfile", configfile)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Congratulations, your workflow is in a good condition" in proc.stdout + proc.stderr


def test_a_bad_config_is_refused_while_the_workflow_is_read(bare_python, tmp_path):
    config = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    name = next(iter(config["experiments"]))
    config["experiments"][name]["tokens"] = "many"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = bare_snakemake(bare_python, "--lint", "--configfile", str(bad))
    assert proc.returncode != 0
    assert f"config key experiments.{name}.tokens" in proc.stdout + proc.stderr


def test_building_jobs_names_the_missing_package(bare_python):
    proc = bare_snakemake(bare_python, "-n", "--forceall", "--configfile", "config/test.yaml")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "needs the Python package 'numpy'" in out and "make venv" in out, out[-3000:]
    assert "KeyError" not in out and "NameError" not in out, out[-3000:]


def test_a_numerical_import_at_the_top_level_fails_the_lint(bare_python, tmp_path):
    """The must-fail input: the workflow with the numerical config module imported where the workflow is read."""
    copy = tmp_path / "repo"
    copy.mkdir()
    for part in ("Snakefile", "workflow", "config"):
        source = ROOT / part
        (shutil.copytree if source.is_dir() else shutil.copy)(
            source, copy / part, **({"ignore": shutil.ignore_patterns("__pycache__")} if source.is_dir() else {})
        )
    common = copy / "workflow" / "rules" / "common.smk"
    common.write_text(
        common.read_text().replace("import os\n", "import os\n\nfrom lowtemp.config import experiment\n", 1)
    )
    proc = bare_snakemake(bare_python, "--lint", cwd=copy)
    assert proc.returncode != 0
    assert "No module named 'numpy'" in proc.stdout + proc.stderr
