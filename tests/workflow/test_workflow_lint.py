"""Conventions: `snakemake --lint` finds nothing, the workflow files are snakefmt-formatted, and the Python is
ruff-clean and ruff-formatted (rules and line length in pyproject.toml's [tool.ruff]).

`make lint` runs the same commands by hand.
"""

from __future__ import annotations

import subprocess

from conftest import SNAKEFILE, SNAKEMAKE

ROOT = SNAKEFILE.parent
SNAKEFMT = SNAKEMAKE.parent / "snakefmt"
RUFF = SNAKEMAKE.parent / "ruff"
# the root Snakefile (an include of workflow/Snakefile), the workflow itself, the rule files
WORKFLOW_FILES = ["Snakefile", "workflow/Snakefile", "workflow/rules"]


def test_snakemake_lint_finds_nothing():
    proc = subprocess.run([str(SNAKEMAKE), "--lint"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "Congratulations, your workflow is in a good condition!" in proc.stdout + proc.stderr


def test_workflow_files_are_snakefmt_formatted():
    """Line length from pyproject.toml ([tool.snakefmt]); `snakefmt` on WORKFLOW_FILES (as `make lint`) fixes them."""
    proc = subprocess.run(
        [str(SNAKEFMT), "--check", *WORKFLOW_FILES], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _ruff(*args, cwd=ROOT):
    return subprocess.run([str(RUFF), *args, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_python_is_ruff_clean_and_formatted():
    """`ruff check` and `ruff format --check` on the repository (package, scripts, tests, the three script folders)."""
    check, fmt = _ruff("check", "."), _ruff("format", "--check", ".")
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    assert fmt.returncode == 0, fmt.stdout[-3000:] + fmt.stderr[-2000:]


def test_ruff_with_this_config_flags_a_bad_file(tmp_path):
    """The inputs the two checks must fail on: an unused import, imports out of order and a hand-wrapped call,
    checked with the repository's own configuration."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "bad.py").write_text("import sys\nimport os\n\nprint(os.sep,\n      1)\n", encoding="utf-8")
    check = _ruff("check", "--output-format", "concise", "bad.py", cwd=tmp_path)
    assert check.returncode == 1 and "F401" in check.stdout and "I001" in check.stdout, check.stdout
    assert _ruff("format", "--check", "bad.py", cwd=tmp_path).returncode == 1
