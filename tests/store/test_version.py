"""The code version from git (lowtemp.store.version): tags, distance, dirty trees, no tag, no checkout, no git;
its place in every file's provenance, and compare's treating it as not data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import lowtemp
from lowtemp.store import compare, netcdf, version

ROOT = Path(__file__).resolve().parents[2]
GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


@pytest.mark.parametrize(
    "describe, dirty, expected",
    [
        ("v0.2.0-0-gabc1234", False, "0.2.0"),
        ("v0.2.0-0-gabc1234", True, "0.2.0+0.gabc1234.dirty"),
        ("v0.2.0-12-gabc1234", False, "0.2.0+12.gabc1234"),
        ("v1.10.3-7-g0123456789ab\n", True, "1.10.3+7.g0123456789ab.dirty"),
    ],
)
def test_format_version(describe, dirty, expected):
    assert version.format_version(describe, dirty) == expected


@pytest.mark.parametrize("describe", ["0.2.0-1-gabc1234", "v0.2.0", "vnext-1-gabc1234", "v0.2.0-1-abc1234", ""])
def test_format_version_refuses_what_is_not_a_v_tag(describe):
    with pytest.raises(ValueError, match="git describe"):
        version.format_version(describe, False)


def _git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t")
    env.update(GIT_COMMITTER_EMAIL="t@example.org", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return proc.stdout.strip()


def _commit(repo: Path, text: str) -> str:
    (repo / "file.txt").write_text(text)
    _git(repo, "add", "file.txt")
    _git(repo, "commit", "-q", "-m", text)
    return _git(repo, "rev-parse", "HEAD")


@needs_git
def test_versions_of_a_checkout_through_its_history(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    first = _commit(repo, "one")
    untagged = version.read_version(repo)
    declared = version.distribution_version()
    assert untagged.version == f"{declared}+untagged.g{first[:7]}" and untagged.commit == first
    assert untagged.dirty is False and "no v* tag" in untagged.source

    _git(repo, "tag", "-a", "v0.3.0", "-m", "release 0.3.0")
    _git(repo, "tag", "not-a-release")  # only v* tags count
    on_tag = version.read_version(repo)
    assert (on_tag.version, on_tag.commit, on_tag.dirty) == ("0.3.0", first, False)
    assert on_tag.source == f"git describe in {repo}"

    second = _commit(repo, "two")
    third = _commit(repo, "three")
    after = version.read_version(repo)
    short = _git(repo, "rev-parse", "--short", "HEAD")
    assert (after.version, after.commit, after.dirty) == (f"0.3.0+2.g{short}", third, False)
    assert second != third

    (repo / "untracked.txt").write_text("not part of the tree")
    assert version.read_version(repo).dirty is False  # untracked files do not make it dirty
    (repo / "file.txt").write_text("edited")
    dirty = version.read_version(repo)
    assert (dirty.version, dirty.dirty) == (f"0.3.0+2.g{short}.dirty", True)
    _git(repo, "add", "file.txt")  # staged but not committed: still dirty
    assert version.read_version(repo).dirty is True
    assert not (repo / ".git" / "index.lock").exists()


def test_no_checkout_gives_unknown_and_says_why(tmp_path):
    record = version.read_version(tmp_path)
    assert (record.version, record.commit, record.dirty) == ("unknown", "unknown", None)
    assert record.source == f"no git checkout at {tmp_path} (installed distribution: {version.distribution_version()})"


@needs_git
def test_no_git_on_path_gives_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    record = version.read_version(ROOT)
    assert (record.version, record.commit, record.dirty) == ("unknown", "unknown", None)
    assert record.source.startswith("git not found on PATH")


@needs_git
def test_a_broken_checkout_gives_unknown(tmp_path):
    (tmp_path / ".git").mkdir()  # a .git that git does not accept
    record = version.read_version(tmp_path)
    assert (record.version, record.commit) == ("unknown", "unknown")
    assert record.source.startswith(f"git rev-parse HEAD in {tmp_path}: ")


@needs_git
def test_the_package_checkout_is_read():
    record = version.code_version()
    assert record.commit in _all_commits()  # not compared with HEAD: a commit may land meanwhile
    assert lowtemp.__version__ == record.version
    assert record.version.split("+")[0].count(".") == 2


def _all_commits() -> set[str]:
    return set(
        subprocess.run(["git", "-C", str(ROOT), "rev-list", "--all"], capture_output=True, text=True).stdout.split()
    )


def test_provenance_records_the_code():
    prov = netcdf.provenance("tiny", {"dim": 3}, 7)
    record = version.code_version()
    assert {k: prov[k] for k in version.PROVENANCE_KEYS} == {
        "version": record.version,
        "commit": record.commit,
        "dirty": record.dirty,
        "version_source": record.source,
    }


def test_a_copy_without_git_imports_writes_and_reports_unknown(tmp_path):
    """The container case: the package copied without .git imports, writes a NetCDF with an unknown version and
    the reason, and that file compares equal in value with one written from the checkout."""
    shutil.copytree(ROOT / "workflow" / "lowtemp", tmp_path / "src" / "workflow" / "lowtemp")
    script = (
        "import json, sys, numpy as np, xarray as xr, lowtemp\n"
        "from lowtemp.store import netcdf\n"
        "assert lowtemp.__file__.startswith(sys.argv[2]), lowtemp.__file__\n"
        "ds = xr.Dataset({'gamma': ((), np.float64(1.25))})\n"
        "netcdf.write_netcdf(ds, sys.argv[1], 'demo', netcdf.provenance('tiny', {'dim': 3}, 7))\n"
        "print(json.dumps(lowtemp.__version__))\n"
    )
    out = tmp_path / "copy" / "a.nc"
    src = str(tmp_path / "src" / "workflow")
    env = dict(os.environ, PYTHONPATH=src)
    proc = subprocess.run([sys.executable, "-c", script, str(out), src], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == "unknown"
    prov = json.loads(xr.open_dataset(out, engine=netcdf.ENGINE).attrs["provenance"])
    assert (prov["version"], prov["commit"], prov["dirty"]) == ("unknown", "unknown", None)
    assert prov["version_source"].startswith(f"no git checkout at {tmp_path / 'src'}")

    here = tmp_path / "checkout" / "a.nc"
    netcdf.write_netcdf(
        xr.Dataset({"gamma": ((), np.float64(1.25))}), here, "demo", netcdf.provenance("tiny", {"dim": 3}, 7)
    )
    assert compare.compare_results(here.parent, out.parent) == []


def _file(path: Path, value: float, prov: dict) -> None:
    netcdf.write_netcdf(xr.Dataset({"gamma": ((), np.float64(value))}), path, "demo", prov)


def test_compare_skips_the_code_record_but_not_the_config_or_the_values(tmp_path):
    base = netcdf.provenance("tiny", {"dim": 3}, 7)
    other_code = {**base, "version": "9.9.9+3.gdeadbee.dirty", "commit": "f" * 40, "dirty": True}
    other_code["version_source"] = "elsewhere"
    _file(tmp_path / "a" / "x.nc", 1.25, base)
    _file(tmp_path / "b" / "x.nc", 1.25, other_code)
    assert compare.compare_results(tmp_path / "a", tmp_path / "b") == []
    # what must still differ: the config slice, the seed, a value
    _file(tmp_path / "c" / "x.nc", 1.25, {**base, "config": {"dim": 2}})
    _file(tmp_path / "d" / "x.nc", 1.25, {**base, "root_seed": 8})
    _file(tmp_path / "e" / "x.nc", 1.5, base)
    for folder, problem in (("c", "provenance differs"), ("d", "provenance differs"), ("e", "values differ")):
        problems = compare.compare_results(tmp_path / "a", tmp_path / folder)
        assert len(problems) == 1 and problem in problems[0], (folder, problems)


def test_compare_reports_an_unreadable_file_instead_of_crashing(tmp_path):
    """A truncated file on one side is a difference to report, naming the file; the other files are still compared."""
    base = netcdf.provenance("tiny", {"dim": 3}, 7)
    for folder in ("a", "b"):
        _file(tmp_path / folder / "x.nc", 1.25, base)
        _file(tmp_path / folder / "y.nc", 2.5, base)
    data = (tmp_path / "b" / "x.nc").read_bytes()
    (tmp_path / "b" / "x.nc").write_bytes(data[: len(data) // 3])
    _file(tmp_path / "b" / "y.nc", 3.5, base)
    problems = compare.compare_results(tmp_path / "a", tmp_path / "b")
    assert len(problems) == 2
    assert problems[0].startswith("x.nc: unreadable in one of the folders")
    assert problems[1].startswith("y.nc:") and "values differ" in problems[1]


JOB = r"""
import subprocess, sys
from lowtemp.stages import joblog
from lowtemp.store import netcdf
repo, log = sys.argv[1], sys.argv[2]
with joblog.logged(log):
    # a commit lands while the job runs: its files must still name the code that ran
    subprocess.run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                    "-m", "meanwhile"], check=True)
    print(netcdf.provenance("tiny", {"dim": 3}, 7)["commit"])
"""


@needs_git
def test_a_job_records_the_code_it_started_with(tmp_path):
    """``joblog.logged`` reads the version as a job starts (and logs it): a commit made while the job runs does not
    change what its files record. Read at the write instead, the job's files named the commit that landed."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    # the package as it is here, committed or not (the clone's own files are HEAD's)
    shutil.copytree(
        ROOT / "workflow" / "lowtemp",
        repo / "workflow" / "lowtemp",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    start = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    env = dict(os.environ, PYTHONPATH=str(repo / "workflow"))
    log = tmp_path / "job.log"
    proc = subprocess.run(
        [sys.executable, "-c", JOB, str(repo), str(log)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert after != start
    assert proc.stdout.split()[-1] == start
    assert "code version " in log.read_text()
