"""The environments agree: conda's environment.yaml and the container recipe install the pip lock.

envs/requirements.lock is the reference (a complete `pip freeze`). envs/environment.yaml
must pin the same packages at the same versions (names compared after PEP 503
normalisation; python and pip come from conda itself). envs/Containerfile must copy
the lock into the image, install it with pip, install the project with --no-deps,
and use the Python minor version that environment.yaml asks for. The build context
files (.containerignore, .dockerignore) must let in what the recipe copies and keep
out what a checkout produces.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "envs" / "requirements.lock"
ENVIRONMENT = ROOT / "envs" / "environment.yaml"
CONTAINERFILE = ROOT / "envs" / "Containerfile"
IGNORE_FILES = [ROOT / ".containerignore", ROOT / ".dockerignore"]

# Packages that conda provides itself, not pinned from the lock.
CONDA_PROVIDED = {"python", "pip"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lines: list[str], where: str, base: Path) -> dict[str, str]:
    """name -> version from pip requirement lines that must all be exact pins (`-r FILE` is followed)."""
    pins: dict[str, str] = {}
    for raw in lines:
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            target = base / line.split(None, 1)[1]
            pins.update(read_pins(target.read_text().splitlines(), str(target), target.parent))
            continue
        m = PIN.match(line)
        assert m, f"{where}: {raw!r} is not an exact pin (name==version)"
        name = normalise(m.group(1))
        assert name not in pins, f"{where}: {m.group(1)} pinned twice"
        pins[name] = m.group(2)
    return pins


def lock_pins() -> dict[str, str]:
    return read_pins(LOCK.read_text().splitlines(), "requirements.lock", LOCK.parent)


def environment() -> tuple[dict[str, str], dict[str, str]]:
    """(conda specs name -> version or '', pip pins name -> version) of environment.yaml."""
    env = yaml.safe_load(ENVIRONMENT.read_text())
    conda: dict[str, str] = {}
    pip: dict[str, str] = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            assert set(dep) == {"pip"}, f"environment.yaml: unexpected dependency block {sorted(dep)}"
            pip.update(read_pins(dep["pip"], "environment.yaml (pip)", ENVIRONMENT.parent))
        else:
            m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==?\s*([^\s=]+))?$", str(dep).strip())
            assert m, f"environment.yaml: cannot read conda spec {dep!r}"
            conda[normalise(m.group(1))] = m.group(2) or ""
    return conda, pip


def test_lock_is_exact_pins_and_holds_setuptools():
    pins = lock_pins()
    assert len(pins) > 10
    # `pip install --no-deps --no-build-isolation .` (Makefile, Containerfile) builds with it
    assert "setuptools" in pins


def test_environment_yaml_pins_the_lock():
    lock = lock_pins()
    conda, pip = environment()
    assert "python" in conda and "pip" in conda, "environment.yaml: python and pip come from conda"
    pinned = dict(pip)
    for name, version in conda.items():
        if name in CONDA_PROVIDED:
            continue
        assert version, f"environment.yaml: conda package {name} must be pinned to the lock's version"
        assert name not in pinned, f"environment.yaml: {name} both from conda and from pip"
        pinned[name] = version
    missing = sorted(set(lock) - set(pinned))
    extra = sorted(set(pinned) - set(lock))
    wrong = sorted(f"{n}: {pinned[n]} (lock {lock[n]})" for n in set(lock) & set(pinned) if pinned[n] != lock[n])
    if missing or extra or wrong:
        block = "".join(
            f"      - {line.strip()}\n"
            for line in LOCK.read_text().splitlines()
            if line.strip() and not line.strip().startswith("#")
        )
        pytest.fail(
            f"envs/environment.yaml is out of sync with envs/requirements.lock:\n"
            f"  missing: {missing}\n  not in the lock: {extra}\n  other version: {wrong}\n"
            f"the pip block to paste under `- pip:`:\n{block}"
        )


# ------------------------------------------------------------------ Containerfile
def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Containerfile, continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in CONTAINERFILE.read_text().splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, "Containerfile ends inside a continued line"
    return out


def _copies(args: str, workdir: str) -> dict[str, str]:
    """source -> absolute destination of a COPY (flags dropped)."""
    words = [w for w in shlex.split(args) if not w.startswith("--")]
    sources, dest = words[:-1], words[-1]
    dest = posixpath.normpath(posixpath.join(workdir, dest)) + ("/" if dest.endswith("/") else "")
    if len(sources) > 1 or dest.endswith("/"):
        return {s: posixpath.join(dest, posixpath.basename(s.rstrip("/"))) for s in sources}
    return {sources[0]: dest}


def containerfile_model() -> dict:
    """What the recipe does, in order: base image, where the lock lands, the pip steps."""
    workdir, copied, steps, base = "/", {}, [], []
    for word, args in instructions():
        if word == "FROM":
            base.append(args.split()[0])
        elif word == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, args))
        elif word in ("COPY", "ADD"):
            copied.update(_copies(args, workdir))
        elif word == "RUN":
            steps.append((workdir, dict(copied), args))
        elif word in ("ENTRYPOINT", "CMD"):
            steps.append((workdir, dict(copied), f"{word} {args}"))
    return {"base": base, "copied": copied, "steps": steps}


def test_containerfile_installs_the_lock_then_the_project_without_deps():
    model = containerfile_model()
    lock_installed = project_installed = False
    for workdir, copied, cmd in model["steps"]:
        if cmd.startswith(("ENTRYPOINT", "CMD")):
            continue
        for part in re.split(r"&&|;", cmd):
            words = shlex.split(part)
            if "pip" not in [posixpath.basename(w) for w in words] or "install" not in words:
                continue
            assert "--no-deps" in words, f"every pip install in the image is --no-deps: {part.strip()!r}"
            if "-r" in words:
                path = posixpath.normpath(posixpath.join(workdir, words[words.index("-r") + 1]))
                assert copied.get("envs/requirements.lock") == path, (
                    f"pip installs {path}, but envs/requirements.lock was copied to "
                    f"{copied.get('envs/requirements.lock')}"
                )
                lock_installed = True
            elif "." in words:
                assert lock_installed, "the project is installed after the lock"
                assert copied.get("pyproject.toml") == posixpath.join(workdir, "pyproject.toml"), (
                    "pyproject.toml is copied into the folder pip installs from"
                )
                project_installed = True
    assert lock_installed, "the Containerfile must `pip install --no-deps -r` the copied envs/requirements.lock"
    assert project_installed, "the Containerfile must `pip install --no-deps .` the project"
    assert any(cmd.startswith(("ENTRYPOINT", "CMD")) and "snakemake" in cmd for _, _, cmd in model["steps"]), (
        "the image runs the workflow by default"
    )
    for needed in ("Snakefile", "config/", "workflow/", "README.md"):
        assert needed in model["copied"], f"the workflow needs {needed} in the image"


def test_containerfile_python_matches_environment_yaml():
    base = containerfile_model()["base"]
    assert len(base) == 1, f"one stage expected, got {base}"
    m = re.match(r"^(?:docker\.io/(?:library/)?)?python:(\d+\.\d+)[.-]?", base[0])
    assert m, f"FROM {base[0]}: a python:X.Y image expected (tests/container/run.sh replaces it with --from)"
    conda, _ = environment()
    assert conda["python"] == m.group(1), f"environment.yaml python={conda['python']}, Containerfile {base[0]}"


# ------------------------------------------------------------------ build context
def _ignore_patterns(path: Path) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _excluded(relpath: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = relpath.strip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pat = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
            excluded = not negated
    return excluded


def test_build_context_ignore_files():
    first, second = (p.read_text() for p in IGNORE_FILES)
    assert first == second, ".containerignore (podman) and .dockerignore (docker) must be identical"
    patterns = _ignore_patterns(IGNORE_FILES[0])
    for source in containerfile_model()["copied"]:
        assert not _excluded(source, patterns), f"{source} is copied by the Containerfile but ignored"
    for produced in (
        ".venv/bin/python",
        "results/x/distances.nc",
        ".snakemake/log",
        ".git/HEAD",
        "workflow/lowtemp/__pycache__/io.cpython-311.pyc",
        "workflow/lowtemp.egg-info/PKG-INFO",
    ):
        assert _excluded(produced, patterns), f"{produced} must stay out of the build context"


def test_bench_installs_the_truth_extra_pinned_in_pyproject():
    """`make bench` installs the optional `truth` extra (the independent W2 solver) at pyproject's pin."""
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["truth"]
    makefile = (ROOT / "Makefile").read_text()
    pinned = re.search(r"^TRUTH\s*:=\s*(\S+)$", makefile, re.M)
    assert pinned and extra == [pinned.group(1)], (extra, pinned)
    assert all(PIN.match(req) for req in extra), extra
