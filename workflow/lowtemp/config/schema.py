"""The config check's first half, which needs the standard library, PyYAML and jsonschema only (Snakemake's own
dependencies): each config file, the schema, the numbers, the experiment names and the results folder.

``check_structure`` runs steps 1–3 of ``lowtemp.config.validation``'s order and ``check_results`` its step 6;
``validation.validate_config`` runs them around the numerical checks. Where the package's numerical
dependencies are missing (the environment of ``snakemake --lint`` in the Snakemake workflow catalog), the
Snakefile runs these alone: the workflow can be read and linted there, and run nowhere but where the package
is installed.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from pathlib import Path

import jsonschema
import yaml

from .plan import ConfigError

#: most YAML nodes (keys and values) a config file may stand for once its aliases are expanded. The
#: largest shipped config has a few hundred; nine lines of aliases can stand for 9⁹ ≈ 4·10⁸, which
#: Snakemake's merge and every later walk of the config visit one by one (docs/reliability.md,
#: "YAML aliases"). Aliases themselves stay allowed: PyYAML's dumper writes them (``&id001``)
#: wherever a config built in Python holds one object twice.
MAX_EXPANDED_NODES = 100_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice, and notes the first alias."""

    first_alias = None  # (anchor, line) of the first alias, for the error of check_alias_expansion

    def compose_node(self, parent, index):
        if self.first_alias is None and self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self.first_alias = (event.anchor, event.start_mark.line + 1)
        return super().compose_node(parent, index)


def _construct_unique_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"{loader.name}, line {key_node.start_mark.line + 1}: duplicate key {key!r} "
                f"(first at line {seen[key] + 1}); YAML would silently keep only the last one"
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def load_config_file(path: str | os.PathLike) -> dict:
    """Parse a YAML config, refusing duplicate keys, alias bombs and non-mapping documents.

    The document's nodes are composed (cheap: an alias is a reference to its anchor's node)
    and their expanded size checked before any Python object is built from them.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        line = text_line_of(path.read_bytes(), exc.start)
        raise ConfigError(
            f"{path}, line {line}: not UTF-8 text (byte {exc.object[exc.start]:#04x}); save it as UTF-8"
        ) from None
    loader = _UniqueKeyLoader(text)
    loader.name = str(path)
    try:
        node = loader.get_single_node()
        if loader.first_alias is not None:
            check_alias_expansion(node, str(path), loader.first_alias)
        data = None if node is None else loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: the YAML is nested too deeply to read (a config is a few levels deep)") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys at top level, got {type(data).__name__}")
    check_data_only(data, str(path))
    return data


#: keys by which Snakemake's YTE templating turns a config file into a program (evaluated as Python)
YTE_KEYS = ("__use_yte__", "__definitions__", "__variables__")


def check_data_only(config: dict, name: str) -> None:
    """ConfigError if the config holds YTE templating keys (``YTE_KEYS``): the project's configs are data. Snakemake
    evaluates YTE when it reads a --configfile, before any of this project's code runs (docs/reliability.md,
    "A config is data"): this check names the key in every file the project reads, and refuses the run."""
    found = [key for key in YTE_KEYS if key in config]
    if found:
        raise ConfigError(
            f"{name}: {', '.join(found)}: YTE templating keys make a config a program (Snakemake runs its Python "
            "when it reads the file); this project's configs are data: remove them and write the values out"
        )


def text_line_of(data: bytes, offset: int) -> int:
    """The 1-based line of byte ``offset`` in ``data``."""
    return data.count(b"\n", 0, offset) + 1


def check_alias_expansion(root: yaml.Node, name: str, first_alias: tuple[str, int]) -> None:
    """ConfigError unless the document, every alias expanded, has at most ``MAX_EXPANDED_NODES`` nodes.

    Counted on the composed nodes, each shared node once (linear in the file, however large the
    expansion); an alias inside the node it refers to would expand forever and is refused too.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise ConfigError(
                f"{name}, line {node.start_mark.line + 1}: this node contains a YAML alias to "
                f"itself, which would expand forever"
            )
        open_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        sizes[id(node)] = min(1 + sum(size(child) for child in children), MAX_EXPANDED_NODES + 1)
        open_nodes.discard(id(node))
        return sizes[id(node)]

    if size(root) > MAX_EXPANDED_NODES:
        anchor, line = first_alias
        raise ConfigError(
            f"{name}: its YAML aliases (the first: *{anchor}, line {line}) expand it to more than "
            f"{MAX_EXPANDED_NODES} keys and values, which Snakemake and this check would visit one by one; "
            f"write a config of that size out, or use fewer aliases"
        )


def check_schema(config: dict, schema_path: str | os.PathLike) -> None:
    """Validate against the JSON schema, filling in its defaults; ConfigError names the key."""
    with open(schema_path) as fh:
        schema = yaml.safe_load(fh)
    error = jsonschema.exceptions.best_match(_Validator(schema).iter_errors(config))
    if error is None:  # valid: a second pass fills in the defaults
        error = jsonschema.exceptions.best_match(_DefaultFillingValidator(schema).iter_errors(config))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ConfigError(f"config key {where}: {error.message}")


def _is_integer(checker, instance) -> bool:
    """``type: integer`` means a Python int: JSON Schema also counts 64.0 and 1e300 as integers, and
    ``int(1e300)`` is a count no array can have (it fails deep in numpy, naming no key)."""
    return isinstance(instance, int) and not isinstance(instance, bool)


#: JSON Schema 2020-12 (as the schema declares) with integers that are Python ints
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)

_PROPERTIES = jsonschema.Draft202012Validator.VALIDATORS["properties"]


def _fill_defaults(validator, properties, instance, schema):
    """The ``properties`` keyword that first sets every absent property that has a ``default``.

    A copy of it: the schema's own ``{}`` would otherwise be one dict shared by every experiment,
    filled once and changed in all of them by a change to one.
    """
    if isinstance(instance, dict):
        for prop, subschema in properties.items():
            if "default" in subschema and prop not in instance:
                instance[prop] = copy.deepcopy(subschema["default"])
    yield from _PROPERTIES(validator, properties, instance, schema)


#: the schema's validator extended to fill in defaults in place while it validates: the recipe of
#: the jsonschema FAQ that ``snakemake.utils.validate`` uses
_DefaultFillingValidator = jsonschema.validators.extend(_Validator, {"properties": _fill_defaults})

#: the largest integer a config may hold: counts and seeds become numpy int64 (array sizes, indices)
INT_MAX = 2**63 - 1


def check_numbers(config: dict) -> None:
    """Every number in the config is finite and every integer fits int64; ConfigError names the key.

    One walk over every key, because the schema cannot say it: its bounds are comparisons and every
    comparison with NaN is false, so NaN passes ``minimum`` and ``maximum`` alike (``memory_limit_gb:
    .nan`` would switch the memory check off), and +inf passes any ``minimum``. No key of the config
    means an infinite value. An integer beyond int64 passes ``type: integer`` and fails later inside
    numpy with a TypeError naming no key.
    """
    for path, value in _numbers(config, ()):
        where = ".".join(str(p) for p in path) or "(top level)"
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"config key {where}: {value} is not a finite number")
        if isinstance(value, int) and not -INT_MAX - 1 <= value <= INT_MAX:
            shown = value if value.bit_length() < 1000 else f"an integer of {value.bit_length()} bits"
            raise ConfigError(
                f"config key {where}: {shown} is out of range (integers must lie within ±2**63, numpy's int64)"
            )


def _numbers(node, path: tuple):
    """(key path, value) of every int and float in a tree of mappings and lists (a bool is no number)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _numbers(value, (*path, key))
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from _numbers(value, (*path, index))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path, node


def check_experiment_names(config: dict) -> None:
    """ConfigError unless every experiment name is a string (YAML reads ``123``, ``1.5``, ``true`` or ``null`` as
    other types) and no two differ only by case (two folders on Linux, one on the file systems of macOS and
    Windows)."""
    experiments = config.get("experiments")
    if not isinstance(experiments, dict):
        return  # the schema names it
    for name in experiments:
        if not isinstance(name, str):
            raise ConfigError(
                f"experiments: the name {name!r} is read by YAML as {type(name).__name__}, not as a name; an "
                "experiment name starts with a letter (quote it to keep other characters, then the schema checks it)"
            )
    folded: dict[str, str] = {}
    for name in experiments:
        if name.casefold() in folded:
            raise ConfigError(
                f"experiments: {folded[name.casefold()]!r} and {name!r} differ only by case: one folder on "
                "case-insensitive file systems (macOS, Windows); rename one"
            )
        folded[name.casefold()] = name


def check_results_folder(results: str | os.PathLike) -> None:
    """The results folder (or the nearest existing folder above it) accepts a new file.

    Links are followed: ``results`` is often a link to scratch space, and what counts is its
    target. A link whose target is missing is refused, not created: this check writes
    nothing, and Snakemake's ``os.makedirs`` cannot create a folder through such a link.
    """
    results = Path(results)
    _refuse_dangling_link(results)
    target = results.resolve()
    shown = str(results) if target == results.absolute() else f"{str(results)} -> {target}"
    if target.exists() and not target.is_dir():
        raise ConfigError(f"results folder {shown!r} exists but is not a folder")
    probe_dir = target
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise ConfigError(f"results folder {shown!r} cannot be created: {probe_dir} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=probe_dir, prefix=".lowtemp-write-probe-"):
            pass
    except OSError as exc:
        raise ConfigError(f"results folder {shown!r} is not writable ({probe_dir}: {exc.strerror})") from None


#: the endings of the files the pipeline writes under results/<experiment>/ (NetCDF, figures, animation, pages, logs)
OUTPUT_SUFFIXES = (".nc", ".png", ".pdf", ".gif", ".mp4", ".md", ".html", ".log", ".tsv", ".json")


def check_output_paths(results: str | os.PathLike, experiments) -> None:
    """ConfigError naming the path when results/<experiment> exists but is not a folder, or when a folder under it
    is named like an output file (``OUTPUT_SUFFIXES``): Snakemake treats an existing path as the finished output."""
    root = Path(results)
    if not root.is_dir():
        return
    for name in experiments:
        folder = root / str(name)
        if folder.exists() and not folder.is_dir():
            raise ConfigError(
                f"experiments.{name}: {folder} exists but is not a folder (the experiment's outputs go in it); "
                "move it away or remove it"
            )
        if not folder.is_dir():
            continue
        for parent, dirs, _files in os.walk(folder):
            for d in sorted(dirs):
                if d.endswith(OUTPUT_SUFFIXES):
                    raise ConfigError(
                        f"experiments.{name}: {Path(parent) / d} is a folder where the pipeline writes a file "
                        "(Snakemake would take it as done); remove it"
                    )


def _refuse_dangling_link(results: Path) -> None:
    """ConfigError naming the link when ``results`` or a folder above it is a link to nothing (or a loop)."""
    for path in (results, *results.parents):
        if path.is_symlink() and not path.exists():
            raise ConfigError(
                f"results folder {str(results)!r}: {path} is a link to {os.readlink(path)!r}, which does not "
                f"exist (or is a loop of links); create that folder or remove the link"
            )


def check_structure(config: dict, schema_path: str | os.PathLike, configfiles=()) -> None:
    """Steps 1–3 of the config check: every config file in ``configfiles`` parses (``load_config_file``), the
    merged ``config`` holds no templating keys and only string names, it matches the schema (defaults filled in,
    in place) and holds only finite numbers within int64; the first failure is a ConfigError naming the key."""
    for path in configfiles:
        load_config_file(path)
    check_data_only(config, "the config")
    check_experiment_names(config)
    check_schema(config, schema_path)
    check_numbers(config)


def check_results(results: str | os.PathLike, experiments) -> None:
    """Step 6: the results folder can be written and nothing in it stands where an output file goes."""
    check_results_folder(results)
    check_output_paths(results, experiments)
