"""Which code wrote a file: the version from git, the commit, whether the tree was dirty.

Releases are annotated tags ``vX.Y.Z`` (CHANGELOG.md; pyproject.toml's ``version`` is the last release or
the one being prepared). In a git checkout the version is read from ``git describe``:

* ``X.Y.Z`` on the tagged commit of a clean tree;
* ``X.Y.Z+N.gHASH`` N commits after the tag ``vX.Y.Z`` (PEP 440 local version, e.g. ``0.2.0+12.gabc1234``);
* ``...dirty`` appended (``0.2.0+12.gabc1234.dirty``, ``0.2.0+0.gabc1234.dirty``) when tracked files differ
  from the commit;
* ``X.Y.Z+untagged.gHASH`` when no ``v*`` tag is reachable (a shallow clone: fetch the tags), X.Y.Z from
  the installed distribution.

Without a checkout (a container image or a copy of the source without ``.git``) or without git, the
version is ``unknown``, the commit ``unknown`` and ``source`` says why and which version the installed
distribution declares; nothing raises. git runs with ``--no-optional-locks``: a job reading the version
never takes ``.git/index.lock`` from someone committing in the same tree.

The record goes into every NetCDF's provenance (``store.netcdf.provenance``) but never into a rule's params:
a new commit does not make Snakemake rerun anything, and ``store.compare`` does not compare it
(``VOLATILE_PROVENANCE``). A checkpoint's fingerprint (``store.checkpoint``) holds the declared release
only, so a commit or an edit in the tree does not throw away the checkpoints of a running simulation.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: the repository root when the package is imported from its checkout (workflow/lowtemp/store/version.py)
CHECKOUT = Path(__file__).resolve().parents[3]
UNKNOWN = "unknown"
#: the provenance keys of the record (``CodeVersion.as_provenance``); ``store.compare`` skips them
PROVENANCE_KEYS = ("version", "commit", "dirty", "version_source")
#: ``git describe --long`` of a ``v*`` tag: vX.Y.Z-N-gHASH
DESCRIBE = re.compile(r"^v(?P<tag>\d+(?:\.\d+)*)-(?P<distance>\d+)-g(?P<hash>[0-9a-f]{4,40})$")


@dataclass(frozen=True)
class CodeVersion:
    """The version string, the full commit hash, whether the tree was dirty (None: unknown), and how it was
    found (or why it could not be)."""

    version: str
    commit: str
    dirty: bool | None
    source: str

    def as_provenance(self) -> dict:
        """The record's keys as ``store.netcdf.provenance`` stores them."""
        return dict(zip(PROVENANCE_KEYS, (self.version, self.commit, self.dirty, self.source), strict=True))


@functools.cache
def distribution_version() -> str:
    """The version the installed distribution declares (pyproject.toml's at install time), or ``unknown``."""
    try:
        return importlib.metadata.version("lowtemp")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN


def format_version(describe: str, dirty: bool) -> str:
    """PEP 440 version from ``git describe --long`` output of a ``v*`` tag (see the module's docstring)."""
    m = DESCRIBE.match(describe.strip())
    if not m:
        raise ValueError(f"not the output of `git describe --long` of a v* tag: {describe!r}")
    if m["distance"] == "0" and not dirty:
        return m["tag"]
    return f"{m['tag']}+{m['distance']}.g{m['hash']}" + (".dirty" if dirty else "")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "--no-optional-locks", "-C", str(root), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def read_version(root: Path | str = CHECKOUT) -> CodeVersion:
    """The code version of the checkout at ``root`` (uncached; see ``code_version``)."""
    root = Path(root)
    declared = distribution_version()
    if not (root / ".git").exists():
        return CodeVersion(UNKNOWN, UNKNOWN, None, f"no git checkout at {root} (installed distribution: {declared})")
    if shutil.which("git") is None:
        return CodeVersion(UNKNOWN, UNKNOWN, None, f"git not found on PATH (installed distribution: {declared})")
    try:
        head = _git(root, "rev-parse", "--verify", "HEAD^{commit}")
        if head.returncode != 0:
            reason = (head.stderr.strip().splitlines() or ["no commit"])[-1]
            return CodeVersion(UNKNOWN, UNKNOWN, None, f"git rev-parse HEAD in {root}: {reason}")
        commit = head.stdout.strip()
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
        described = _git(root, "describe", "--tags", "--long", "--match", "v[0-9]*", "HEAD")
    except (OSError, subprocess.SubprocessError) as exc:
        return CodeVersion(UNKNOWN, UNKNOWN, None, f"git failed in {root}: {type(exc).__name__}: {exc}")
    if described.returncode == 0 and DESCRIBE.match(described.stdout.strip()):
        version = format_version(described.stdout, bool(dirty))
        return CodeVersion(version, commit, dirty, f"git describe in {root}")
    untagged = f"{declared if declared != UNKNOWN else '0'}+untagged.g{commit[:7]}" + (".dirty" if dirty else "")
    return CodeVersion(untagged, commit, dirty, f"no v* tag reachable from HEAD in {root} (a shallow clone?)")


@functools.cache
def code_version() -> CodeVersion:
    """The code version of the package's own checkout, read once per process."""
    return read_version(CHECKOUT)
