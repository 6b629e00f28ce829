"""Workflow conventions: `snakemake --lint` finds nothing and the workflow files are snakefmt-formatted.

`make lint` runs the same two commands by hand.
"""

from __future__ import annotations

import subprocess

from conftest import SNAKEFILE, SNAKEMAKE

ROOT = SNAKEFILE.parent
SNAKEFMT = SNAKEMAKE.parent / "snakefmt"
# the root Snakefile (an include of workflow/Snakefile), the workflow itself, the rule files
WORKFLOW_FILES = ["Snakefile", "workflow/Snakefile", "workflow/rules"]


def test_snakemake_lint_finds_nothing():
    proc = subprocess.run([str(SNAKEMAKE), "--lint"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "Congratulations, your workflow is in a good condition!" in proc.stdout + proc.stderr


def test_workflow_files_are_snakefmt_formatted():
    """Line length from pyproject.toml ([tool.snakefmt]); `snakefmt` on WORKFLOW_FILES (as `make lint`) fixes them."""
    proc = subprocess.run([str(SNAKEFMT), "--check", *WORKFLOW_FILES], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
