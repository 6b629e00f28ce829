"""The whole config check, run once when the Snakefile is read, before any job.

Order (the first failure stops with one error naming the key or file):

1. every config file parses as YAML with no duplicate keys (PyYAML would keep the
   last of two experiments of the same name, silently);
2. the JSON schema (``workflow/schemas/config.schema.yaml``: types, ranges,
   unknown keys), then its defaults are filled in by ``snakemake.utils.validate``;
3. per experiment, what the schema cannot express (``pipeline.validate_experiment``:
   β grid, time grid, shapes, Assumptions 1–3 on the matrices and ρ0);
4. the memory of the largest job against ``memory_limit_gb``;
5. the results folder can be written.

Nothing is written by these checks (the results-folder probe creates and
removes one temporary file).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import jsonschema
import yaml

from . import matrices, resources
from .pipeline import ConfigError, validate_experiment


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice."""


def _construct_unique_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"{loader.name}, line {key_node.start_mark.line + 1}: duplicate key {key!r} "
                f"(first at line {seen[key] + 1}); YAML would silently keep only the last one")
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def load_config_file(path: str | os.PathLike) -> dict:
    """Parse a YAML config, refusing duplicate keys and non-mapping documents."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    loader = _UniqueKeyLoader(text)
    loader.name = str(path)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys at top level, got {type(data).__name__}")
    return data


def check_schema(config: dict, schema_path: str | os.PathLike) -> None:
    """Validate against the JSON schema, filling in its defaults; ConfigError names the key."""
    with open(schema_path) as fh:
        schema = yaml.safe_load(fh)
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ConfigError(f"config key {where}: {error.message}")
    from snakemake.utils import validate  # fills the defaults in place

    validate(config, str(schema_path))


def machine_memory_bytes() -> int:
    """Physical memory, or the cgroup limit where one is set and smaller."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def check_results_folder(results: str | os.PathLike) -> None:
    """The results folder (or the nearest existing folder above it) accepts a new file."""
    results = Path(results)
    if results.exists() and not results.is_dir():
        raise ConfigError(f"results folder {str(results)!r} exists but is not a folder")
    probe_dir = results
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    try:
        with tempfile.TemporaryFile(dir=probe_dir, prefix=".lowtemp-write-probe-"):
            pass
    except OSError as exc:
        raise ConfigError(f"results folder {str(results)!r} is not writable ({probe_dir}: {exc.strerror})") from None


def largest_job_memory_bytes(experiment: dict, M: matrices.AttentionMatrices | None = None) -> int:
    """Peak memory of the experiment's largest job (``lowtemp.resources``, the SLURM requests' model)."""
    need = 0
    for stage in resources.STAGES:
        betas = experiment["betas"] if stage == "finite_temperature" else [None]
        for beta in betas:
            need = max(need, resources.memory_mb(stage, experiment, beta=beta, matrices=M, threads=2))
    return need * 2**20


def validate_config(config: dict, schema_path: str | os.PathLike, configfiles=(), results="results",
                    memory_estimate=largest_job_memory_bytes) -> dict[str, matrices.AttentionMatrices]:
    """All checks of the module docstring; returns the checked matrices per experiment.

    ``memory_estimate(experiment, M) -> bytes`` gives the peak memory of the
    experiment's largest job; it is compared with ``memory_limit_gb``.
    """
    for path in configfiles:
        load_config_file(path)
    check_schema(config, schema_path)
    checked = {name: validate_experiment(name, exp, config["root_seed"]) for name, exp in config["experiments"].items()}
    if memory_estimate is not None:
        limit_gb = config.get("memory_limit_gb")
        limit = machine_memory_bytes() if limit_gb is None else float(limit_gb) * 2**30
        source = "this machine's memory" if limit_gb is None else "memory_limit_gb"
        for name, exp in config["experiments"].items():
            need = memory_estimate(exp, checked[name])
            if need > limit:
                raise ConfigError(
                    f"experiments.{name}: the largest job needs about {need / 2**30:.1f} GiB "
                    f"(tokens = {exp['tokens']}, replicas = {exp['replicas']}, snapshots = "
                    f"{exp['time']['snapshots']}), more than the {limit / 2**30:.1f} GiB of {source}; "
                    f"use fewer tokens, replicas or snapshots, or set memory_limit_gb for the compute nodes")
    check_results_folder(results)
    return checked
