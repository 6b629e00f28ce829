"""The package's structure: its subpackages are its layers, each importing only the layers above it; every
module imports alone, no module imports Snakemake, the config layer (what the Snakefile parses) loads neither
numba, POT nor matplotlib, the figures load neither numba nor POT, no import hides inside a function, and every
public function and class says what it does."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import rule_blocks, rule_script

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "workflow" / "lowtemp"
#: the layers, top first: a module may import its own subpackage and those before it, never one after it
LAYERS = ("model", "dynamics", "transport", "store", "analysis", "config", "plotting", "stages")
#: every module as "subpackage.module", and each subpackage's __init__ ("" for the package's own)
MODULES = sorted(f"{p.parent.name}.{p.stem}" for p in PACKAGE.glob("*/*.py") if p.stem != "__init__")
INITS = [""] + list(LAYERS)
#: what the layer and cycle checks read: every module and every subpackage's __init__
CHECKED = list(LAYERS) + MODULES


def _path(module: str) -> Path:
    if module == "":
        return PACKAGE / "__init__.py"
    if module in LAYERS:
        return PACKAGE / module / "__init__.py"
    sub, name = module.split(".")
    return PACKAGE / sub / f"{name}.py"


def _tree(module: str) -> ast.Module:
    return ast.parse(_path(module).read_text(encoding="utf-8"))


def _named(dotted: list[str]) -> str:
    """ "sub.mod" for a module of the package, else "sub" (a subpackage), from its dotted path inside lowtemp."""
    return ".".join(dotted[:2]) if ".".join(dotted[:2]) in MODULES else dotted[0]


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """The package's modules ("sub.mod") or subpackages ("sub") an import names, resolved from ``module``."""
    sub = module.split(".")[0] if module else ""
    if node.level == 0:
        if not (node.module or "").startswith("lowtemp"):
            return []
        base = node.module.split(".")[1:]
    else:
        if node.level > 2 or (node.level == 2 and not sub):
            raise AssertionError(f"{module}: import beyond the package (level {node.level})")
        base = ([sub] if node.level == 1 and sub else []) + (node.module.split(".") if node.module else [])
    if not base:  # from lowtemp import sub / from .. import sub
        return [a.name for a in node.names if a.name in LAYERS]
    if len(base) == 1:  # from .sub import mod / from . import mod / from lowtemp.sub import mod
        return [_named([base[0], a.name]) for a in node.names]
    return [_named(base)]


def _dynamic_import(node: ast.AST) -> str | None:
    """The module a call ``importlib.import_module("lowtemp…")`` or ``__import__("lowtemp…")`` names."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    target = node.args[0].value
    if name in ("import_module", "__import__") and isinstance(target, str) and target.startswith("lowtemp."):
        return target
    return None


def package_imports(module: str, source: str | None = None) -> set[str]:
    """What ``module`` (or ``source`` read as that module) imports from the package anywhere in its file: top
    level, inside if/try/with/class bodies, and by ``importlib.import_module``; as "sub.mod" or "sub"."""
    out = set()
    for node in ast.walk(_tree(module) if source is None else ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            out.update(_resolve(module, node))
        elif isinstance(node, ast.Import):
            out.update(_named(a.name.split(".")[1:]) for a in node.names if a.name.startswith("lowtemp."))
        elif (target := _dynamic_import(node)) is not None:
            out.add(_named(target.split(".")[1:]))
    return out


def layer_violations(imports: dict[str, set[str]]) -> list[str]:
    """Every import of a layer below the importer's own (``LAYERS`` order), as readable lines."""
    bad = []
    for module, names in imports.items():
        own = LAYERS.index(module.split(".")[0])
        for name in sorted(names):
            target = name.split(".")[0]
            if target in LAYERS and LAYERS.index(target) > own:
                bad.append(f"{module} imports {name} (layer {target} comes after {module.split('.')[0]})")
    return bad


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_every_module_lives_in_a_layer():
    assert not sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"), "modules outside the layers"
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(LAYERS)
    nested = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.glob("*/*")
        if p.is_dir() and "__pycache__" not in (p.name, p.parent.name)  # numba's cache lives in __pycache__/numba
    ]
    assert not nested, f"folders inside a layer (the checks read one level): {nested}"
    assert len(MODULES) > 30


def test_each_layer_imports_only_the_layers_above_it():
    imports = {m: package_imports(m) for m in CHECKED}
    assert not layer_violations(imports)


def declared_imports(layer: str) -> set[str]:
    """The layers a subpackage's docstring says it imports (its last line, "Imports: a, b.")."""
    line = ast.get_docstring(_tree(layer)).strip().splitlines()[-1]
    m = re.fullmatch(r"Imports: (.+)\.", line)
    assert m, f"{layer}/__init__.py: the docstring's last line must say 'Imports: …', got {line!r}"
    return set() if m[1] == "nothing else from the package" else set(m[1].split(", "))


def test_each_layer_imports_what_its_docstring_says():
    """Tighter than the order: the layers each subpackage actually imports are those its docstring declares."""
    for layer in LAYERS:
        used = set()
        for m in CHECKED:
            if m.split(".")[0] == layer:
                used |= {n.split(".")[0] for n in package_imports(m)} - {layer}
        assert used == declared_imports(layer), layer


def test_the_layer_check_sees_the_imports():
    """The check reads the real imports (a parser that found none would pass it vacuously) and fails a
    module that imports a later layer."""
    assert {"config.experiment", "store.datasets", "stages.joblog", "dynamics.kernels"} <= package_imports(
        "stages.simulate"
    )
    assert {"analysis.particle_budget", "dynamics.integrate", "config.experiment"} <= package_imports("config.studies")
    assert package_imports("transport.assignment") == {
        "transport.duals",
        "transport.guide",
        "transport.limits",
        "transport.neighbours",
        "transport.pricing",
        "transport.simplex",
    }
    assert layer_violations({"model.matrices": {"dynamics.kernels"}}) == [
        "model.matrices imports dynamics.kernels (layer dynamics comes after model)"
    ]
    assert layer_violations({"config.resources": {"stages.convergence"}})
    assert not layer_violations({"stages.fit": {"analysis.claims", "store"}})
    assert layer_violations({"model": {"stages.joblog"}})  # a subpackage's __init__ is held to its layer


@pytest.mark.parametrize(
    "source",
    [
        "import lowtemp.stages.joblog as s",
        "import lowtemp.stages",
        "from lowtemp import stages",
        "from .. import stages",
        "from ..stages.joblog import logged",
        "from ..stages import joblog",
        "from ..stages import *",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lowtemp.stages import simulate",
        "try:\n    from ..stages import joblog\nexcept ImportError:\n    pass",
        "class _X:\n    from lowtemp.stages import joblog",
        "import importlib\n_j = importlib.import_module('lowtemp.stages.joblog')",
        "_j = __import__('lowtemp.stages.joblog')",
    ],
)
def test_every_form_of_a_later_layers_import_is_caught(source):
    """The inputs the layer check must fail on: each form of importing a later layer, placed in model.exact."""
    assert layer_violations({"model.exact": package_imports("model.exact", source)}), source


def test_no_import_cycle():
    graph = {m: {n for n in package_imports(m) if n in MODULES} for m in MODULES}
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                pytest.fail(f"import cycle: {' -> '.join(path + [m, n])}")
            if n not in state:
                visit(n, path + [m])
        state[m] = 2

    for m in MODULES:
        if m not in state:
            visit(m, [])


def test_every_module_imports_alone():
    """Each module in a fresh interpreter: nothing relies on another module having been imported first."""
    code = "; ".join(
        f"import subprocess, sys; r = subprocess.run([sys.executable, '-c', 'import lowtemp.{m}'], "
        f"capture_output=True, text=True); print('{m}', r.returncode, r.stderr[-400:].replace(chr(10), ' '))"
        for m in MODULES
    )
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    failed = [line for line in proc.stdout.splitlines() if line.split()[1] != "0"]
    assert not failed, failed


HEAVY = ("numba", "ot", "matplotlib", "torch")


def _heavy_after(imports: str) -> list[str]:
    proc = _run(f"import sys, {imports}; print(','.join(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    assert proc.returncode == 0, proc.stderr
    return [m for m in proc.stdout.strip().split(",") if m]


def test_the_config_layer_loads_no_numba_pot_or_matplotlib():
    """What the Snakefile does when it parses: import every module of lowtemp.config, check the default config
    (validate_config) and size every job (resources.estimate, group_of, gpus); nothing heavy comes with it."""
    config = ", ".join(f"lowtemp.{m}" for m in MODULES if m.startswith("config."))
    assert _heavy_after(config) == []
    snakefile_work = (
        f"{config}, yaml; from lowtemp.config import registry, resources, validation; "
        f"cfg = yaml.safe_load(open({str(ROOT / 'config' / 'config.yaml')!r})); "
        f"M = validation.validate_config(cfg, {str(ROOT / 'workflow' / 'schemas' / 'config.schema.yaml')!r}, "
        f"results={str(ROOT / 'results-probe-never-written')!r}, memory_estimate=None); "
        "[(resources.estimate(s, e, beta=float(e['betas'][0]), matrices=M[n], threads=2), resources.group_of(s, e), "
        "resources.gpus(s, e)) for n, e in cfg['experiments'].items() for s in registry.STAGES]"
    )
    assert _heavy_after(snakefile_work) == []
    # the probe itself sees a heavy import: the stage that simulates loads numba
    assert "numba" in _heavy_after("lowtemp.stages.simulate")


#: the modules that reading the workflow imports (beside the standard library: PyYAML and jsonschema only)
READING = ("config.plan", "config.schema", "config.registry", "config.params")


def _third_party_after(imports: str) -> list[str]:
    """The top-level modules outside the standard library that ``imports`` leaves in ``sys.modules``."""
    proc = _run(
        f"import sys, {imports}; print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} - "
        "set(sys.stdlib_module_names) - {'lowtemp'})))"
    )
    assert proc.returncode == 0, proc.stderr
    return [m for m in proc.stdout.strip().split(",") if m]


def test_reading_the_workflow_imports_none_of_the_numerical_packages():
    """The strict test, an environment holding Snakemake alone, is tests/workflow/test_catalog_lint.py."""
    numerical = {"numpy", "scipy", "xarray", "pandas", "numba", "matplotlib", "ot", "torch", "h5netcdf", "netCDF4"}
    assert not numerical & set(_third_party_after(", ".join(f"lowtemp.{m}" for m in READING)))
    # the probe sees what the numerical config check imports
    assert "numpy" in _third_party_after("lowtemp.config.validation")


def test_transport_limits_load_no_numba():
    assert _heavy_after("lowtemp.transport.limits") == []


def test_figures_load_neither_numba_nor_pot():
    """Drawing (the plotting layer) and the figure stages that call it need neither the kernels nor POT."""
    plotting = ", ".join(f"lowtemp.{m}" for m in MODULES if m.startswith("plotting."))
    assert not {"numba", "ot"} & set(_heavy_after(f"{plotting}, lowtemp.stages.figures"))


def test_no_module_imports_snakemake():
    for m in MODULES:
        for node in ast.walk(_tree(m)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.split(".")[0] == "snakemake" for n in names), (m, names)
    proc = _run(
        "import sys, lowtemp.config.validation, lowtemp.stages.simulate, lowtemp.stages.convergence, "
        "lowtemp.config.resources; print('snakemake' in sys.modules)"
    )
    assert proc.stdout.strip() == "False", proc.stderr


def script_stage_calls(source: str) -> set[str]:
    """The stage functions a Snakemake script calls, as "F.stage_X" where ``from lowtemp.stages import F``."""
    tree = ast.parse(source)
    stages = {
        a.asname or a.name
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and n.module == "lowtemp.stages"
        for a in n.names
    }
    return {
        f"{n.func.value.id}.{n.func.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id in stages
        and n.func.attr.startswith("stage_")
    }


def rule_map_violations(rule_files: dict[str, str], scripts: dict[str, str], stage_names: dict[str, set]) -> list:
    """Where the map rule X (in F.smk) → workflow/scripts/X.py → lowtemp.stages.F.stage_X breaks: ``rule_files``
    maps F to the file's text, ``scripts`` a script's name to its source, ``stage_names`` F to the names bound at
    the top level of lowtemp.stages.F."""
    bad = []
    for stem, text in rule_files.items():
        for rule, body in rule_blocks(text).items():
            script = rule_script(body)
            if script is None:
                continue
            if script != f"../scripts/{rule}.py":
                bad.append(f"rule {rule} runs {script}, not ../scripts/{rule}.py")
            elif f"stage_{rule}" not in stage_names.get(stem, set()):
                bad.append(f"rule {rule} ({stem}.smk): no lowtemp.stages.{stem}.stage_{rule}")
            elif script_stage_calls(scripts.get(f"{rule}.py", "")) != {f"{stem}.stage_{rule}"}:
                bad.append(f"rule {rule}: its script does not call {stem}.stage_{rule} (and nothing else)")
    return bad


def _top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8")) if path.exists() else ast.Module(body=[], type_ignores=[])
    names = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Assign):
            names.update(t.id for t in n.targets if isinstance(t, ast.Name))
    return names


def _workflow_map():
    rules = {p.stem: p.read_text(encoding="utf-8") for p in (ROOT / "workflow" / "rules").glob("*.smk")}
    scripts = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "workflow" / "scripts").glob("*.py")}
    stage_names = {stem: _top_level_names(PACKAGE / "stages" / f"{stem}.py") for stem in rules}
    return rules, scripts, stage_names


def test_every_rule_runs_its_script_which_calls_its_stage_function():
    """``rule X`` in workflow/rules/F.smk runs ``workflow/scripts/X.py``, which calls
    ``lowtemp.stages.F.stage_X`` (the map rule → function is one hop); rules without a script have none."""
    rules, scripts, stage_names = _workflow_map()
    assert rule_map_violations(rules, scripts, stage_names) == []
    with_script = [r for text in rules.values() for r, body in rule_blocks(text).items() if rule_script(body)]
    assert len(with_script) == len(scripts) >= 12


def test_a_broken_rule_map_is_caught():
    """The inputs the map check must fail on: a rule running another rule's script, a script calling another
    stage, a rule whose stage function is missing, and rule headers with a comment or as a checkpoint."""
    rules, scripts, stage_names = _workflow_map()
    claims = {"fit": rules["fit"].replace('"../scripts/claims.py"', '"../scripts/fit.py"')}
    assert rule_map_violations(claims, scripts, stage_names) == [
        "rule claims runs ../scripts/fit.py, not ../scripts/claims.py"
    ]
    other = dict(scripts, **{"claims.py": scripts["claims.py"].replace("fit.stage_claims(", "fit.stage_fit(")})
    assert rule_map_violations({"fit": rules["fit"]}, other, stage_names) == [
        "rule claims: its script does not call fit.stage_claims (and nothing else)"
    ]
    for header in ("rule extra:  # a new rule", "checkpoint extra:"):
        text = rules["fit"] + f'\n\n{header}\n    output:\n        "x"\n    script:\n        "../scripts/extra.py"\n'
        assert rule_map_violations({"fit": text}, scripts, stage_names) == [
            "rule extra (fit.smk): no lowtemp.stages.fit.stage_extra"
        ]


def test_no_import_inside_a_function():
    for m in MODULES:
        for node in ast.walk(_tree(m)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
                assert not inner, f"{m}.{node.name} imports inside its body (line {inner[0].lineno})"


@pytest.mark.parametrize("module", INITS + MODULES)
def test_public_functions_and_classes_have_docstrings(module):
    tree = _tree(module)
    assert ast.get_docstring(tree), f"{module or 'lowtemp'} has no module docstring"
    missing = [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and not node.name.startswith("_")
        and not ast.get_docstring(node)
    ]
    assert not missing, f"{module}: no docstring on {missing}"
