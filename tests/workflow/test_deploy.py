"""Deployment with snakedeploy: the real `snakedeploy deploy-workflow` into a fresh folder, then a dry run there.

The source is a `git clone` of this repository (its committed files, as a user gets them).
snakedeploy's local-path mode (a source that is an existing folder) copies config/ and
LICENSE into the deployment and writes workflow/Snakefile with a `module` whose
`snakefile:` is the source repository's workflow/Snakefile as a relative path,
"workflow/Snakefile". Snakemake resolves a module's relative snakefile against the
deploying Snakefile's folder (deployment/workflow/), where it does not exist: a local
deployment must name the clone's file, so the test points the module at it, the one
edit of what snakedeploy wrote (a deployment from a git URL names
`github(..., path="workflow/Snakefile", tag=...)` instead, which needs the network).
The rules import the package lowtemp, installed in the venv running the tests.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SNAKEMAKE

SNAKEDEPLOY = SNAKEMAKE.parent / "snakedeploy"
GIT = shutil.which("git")

pytestmark = pytest.mark.skipif(
    GIT is None or not (ROOT / ".git").exists(), reason="clones the repository: needs git and a git checkout"
)

#: the rules a dry run of the default config (config/config.yaml) schedules
DEFAULT_RULES = {
    "matrices",
    "initial_tokens",
    "finite_temperature",
    "zero_temperature",
    "distances_beta",
    "distances",
    "particle_error_beta",
    "particle_error",
    "convergence",
    "convergence_figure",
    "fit",
    "claims",
    "figure",
    "animation",
    "claims_summary",
    "all",
}


def job_stats(output: str) -> dict[str, int]:
    """rule -> job count from the last `Job stats:` table of a Snakemake dry run."""
    tables = re.findall(r"Job stats:\n.*?\n-+ +-+\n(.*?)\n\s*\n", output, re.S)
    assert tables, f"no job stats in the dry run's output:\n{output[-3000:]}"
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", tables[-1], re.M))
    return {rule: int(n) for rule, n in counts.items()}


def run(cmd: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> tuple[Path, Path]:
    """(the clone, the deployment folder) after `snakedeploy deploy-workflow CLONE DEST --branch BRANCH`."""
    base = tmp_path_factory.mktemp("deploy")
    clone = base / "lowtemp"
    run([GIT, "clone", "--quiet", str(ROOT), str(clone)], cwd=base)
    assert (clone / "workflow" / "Snakefile").exists(), "the committed files have no workflow/Snakefile (commit it)"
    branch = run([GIT, "rev-parse", "--abbrev-ref", "HEAD"], cwd=clone).stdout.strip()
    dest = base / "deployment"
    run([str(SNAKEDEPLOY), "deploy-workflow", str(clone), str(dest), "--branch", branch], cwd=base)
    return clone, dest


def test_snakedeploy_writes_a_module_of_workflow_snakefile(deployment):
    clone, dest = deployment
    snakefile = (dest / "workflow" / "Snakefile").read_text()
    assert re.search(r"^module lowtemp:$", snakefile, re.M), snakefile
    assert re.search(r"^use rule \* from lowtemp$", snakefile, re.M), snakefile
    assert re.search(r'^configfile: "config/config\.yaml"$', snakefile, re.M), snakefile
    declared = re.search(r"snakefile:\s*\n\s*(.+)\n", snakefile).group(1).strip()
    assert declared == '"workflow/Snakefile"', snakefile  # the catalog's layout: the main file is workflow/Snakefile
    for copied in ("config/config.yaml", "config/test.yaml", "config/README.md", "LICENSE"):
        assert (dest / copied).read_bytes() == (clone / copied).read_bytes(), copied


@pytest.fixture(scope="module")
def deployed(deployment) -> tuple[Path, Path]:
    """The deployment with its module pointed at the clone's workflow/Snakefile (module docstring)."""
    clone, dest = deployment
    snakefile = dest / "workflow" / "Snakefile"
    if not (snakefile.parent / "workflow" / "Snakefile").exists():  # the local mode's relative path
        text = snakefile.read_text()
        snakefile.write_text(text.replace('"workflow/Snakefile"', json.dumps(str(clone / "workflow" / "Snakefile")), 1))
    return clone, dest


def test_deployed_workflow_dry_runs_the_jobs_of_the_clone(deployed):
    clone, dest = deployed
    stats = job_stats(run([str(SNAKEMAKE), "-n", "--cores", "1"], cwd=dest).stdout)
    assert set(stats) - {"total"} == DEFAULT_RULES, stats
    # the same jobs as the clone's own Snakefile (the root include of workflow/Snakefile) on the same config
    assert stats == job_stats(run([str(SNAKEMAKE), "-n", "--cores", "1"], cwd=clone).stdout)
    assert not (dest / "results").exists()


def test_deployed_workflow_replaces_its_config_as_readme_says(deployed):
    """The deployed Snakefile loads config/config.yaml unconditionally, so `--configfile` alone would add the
    default experiments; with --replace-workflow-config (README, "Deploying") the given config is the whole config."""
    clone, dest = deployed
    args = ["-n", "--cores", "1", "--configfile", "config/test.yaml"]
    proc = run([str(SNAKEMAKE), *args, "--replace-workflow-config"], cwd=dest)
    planned = set(re.findall(r"results/([A-Za-z0-9_-]+)/matrices\.nc", proc.stdout))
    assert planned == set(yaml.safe_load((clone / "config" / "test.yaml").read_text())["experiments"])
    assert job_stats(proc.stdout) == job_stats(run([str(SNAKEMAKE), *args], cwd=clone).stdout)
