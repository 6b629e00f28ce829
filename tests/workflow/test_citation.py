"""CITATION.cff is valid Citation File Format 1.2.0 and agrees with pyproject.toml, CHANGELOG.md, README.md and
the release tags.

The schema is the format's own (``$id`` https://citation-file-format.github.io/1.2.0/schema.json), stored in
tests/workflow/data/ as the PyPI package cffconvert 2.0.0 ships it, so the check runs offline; cffconvert itself
cannot join envs/requirements.lock (it requires jsonschema < 4). By hand: ``cffconvert --validate``.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CFF = ROOT / "CITATION.cff"
SCHEMA = Path(__file__).parent / "data" / "citation-file-format-1.2.0.schema.json"
#: "## [X.Y.Z] - YYYY-MM-DD" headings of CHANGELOG.md, newest first
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def _citation() -> dict:
    return yaml.safe_load(CFF.read_text())


def _errors(document: dict) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document))


def test_the_schema_is_the_formats_own():
    schema = json.loads(SCHEMA.read_text())
    assert schema["$id"] == "https://citation-file-format.github.io/1.2.0/schema.json"
    assert set(schema["required"]) == {"authors", "cff-version", "message", "title"}


def test_citation_is_valid_cff_1_2_0():
    citation = _citation()
    assert citation["cff-version"] == "1.2.0"
    assert _errors(citation) == []


def _drop(key):
    return lambda c: c.pop(key)


def _set(key, value):
    return lambda c: c.__setitem__(key, value)


@pytest.mark.parametrize(
    "what, edit",
    [
        ("no authors", _drop("authors")),
        ("no title", _drop("title")),
        ("a date that is not a date", _set("date-released", "5 December 2026")),
        ("a key the format does not know", _set("doi-of-the-code", "x")),
        ("a reference without a type", lambda c: c["references"][0].pop("type")),
        ("an author that is a plain string", _set("authors", ["Alcalde"])),
    ],
)
def test_the_schema_check_refuses_broken_citations(what, edit):
    broken = copy.deepcopy(_citation())
    edit(broken)
    assert _errors(broken), what


def _changelog_releases() -> list[tuple[str, str]]:
    return RELEASE.findall((ROOT / "CHANGELOG.md").read_text())


def test_version_and_date_agree_with_pyproject_and_the_changelog():
    citation = _citation()
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    releases = _changelog_releases()
    assert releases, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' heading"
    assert citation["version"] == declared == releases[0][0]
    assert citation["date-released"] == releases[0][1]
    assert releases == sorted(releases, key=lambda r: tuple(map(int, r[0].split("."))), reverse=True)


def test_the_paper_is_the_one_readme_names():
    readme = " ".join((ROOT / "README.md").read_text().split())
    paper = _citation()["references"][0]
    assert f"*{paper['title']}*" in readme
    arxiv = next(i["value"] for i in paper["identifiers"] if i["value"].startswith("arXiv:"))
    assert f"({arxiv})" in readme and paper["url"].endswith(arxiv.removeprefix("arXiv:"))
    names = ", ".join(a["family-names"] for a in paper["authors"])
    assert f"bound of {names}," in readme


def test_release_tags_are_annotated_and_in_the_changelog():
    """Every v* tag of the repository is annotated and has its CHANGELOG entry (none yet in a clone without
    tags: then nothing to check)."""
    proc = subprocess.run(["git", "-C", str(ROOT), "tag", "--list", "v*"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout: {proc.stderr.strip()}")
    released = {v for v, _ in _changelog_releases()}
    for tag in proc.stdout.split():
        kind = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-t", tag], capture_output=True, text=True)
        assert kind.stdout.strip() == "tag", f"{tag} is a lightweight tag: releases are annotated (git tag -a)"
        assert tag.removeprefix("v") in released, f"{tag} has no entry in CHANGELOG.md"
