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

PACKAGE = Path(__file__).resolve().parents[2] / "workflow" / "lowtemp"
#: the layers, top first: a module may import its own subpackage and those before it, never one after it
LAYERS = ("model", "dynamics", "transport", "store", "analysis", "config", "stages")
#: every module as "subpackage.module" ("" for the package's own __init__), and each subpackage's __init__
MODULES = sorted(f"{p.parent.name}.{p.stem}" for p in PACKAGE.glob("*/*.py") if p.stem != "__init__")
INITS = [""] + list(LAYERS)


def _path(module: str) -> Path:
    if module == "":
        return PACKAGE / "__init__.py"
    if module in LAYERS:
        return PACKAGE / module / "__init__.py"
    sub, name = module.split(".")
    return PACKAGE / sub / f"{name}.py"


def _tree(module: str) -> ast.Module:
    return ast.parse(_path(module).read_text(encoding="utf-8"))


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """The package's modules ("sub.mod") or subpackages ("sub") an import names, resolved from ``module``."""
    sub = module.split(".")[0] if module else ""
    if node.level == 0:
        if not (node.module or "").startswith("lowtemp"):
            return []
        base = node.module.split(".")[1:]
    else:
        base = ([sub] if node.level == 1 and sub else []) + (node.module.split(".") if node.module else [])
        if node.level > 2 or (node.level == 2 and not sub):
            raise AssertionError(f"{module}: import beyond the package (level {node.level})")
    if len(base) >= 2:
        return [".".join(base[:2])]
    if len(base) == 1:  # from .sub import mod / from . import mod
        return [f"{base[0]}.{a.name}" if f"{base[0]}.{a.name}" in MODULES else base[0] for a in node.names]
    return [a.name for a in node.names if a.name in LAYERS]  # from .. import sub


def package_imports(module: str) -> set[str]:
    """What ``module`` imports from the package at top level, as "sub.mod" or "sub"."""
    out = set()
    for node in _tree(module).body:
        if isinstance(node, ast.ImportFrom):
            out.update(_resolve(module, node))
        elif isinstance(node, ast.Import):
            out.update(".".join(a.name.split(".")[1:3]) for a in node.names if a.name.startswith("lowtemp."))
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
    assert len(MODULES) > 30


def test_each_layer_imports_only_the_layers_above_it():
    imports = {m: package_imports(m) for m in MODULES}
    assert not layer_violations(imports)


def test_the_layer_check_sees_the_imports():
    """The check reads the real imports (a parser that found none would pass it vacuously) and fails a
    module that imports a later layer."""
    assert {"config.experiment", "store.datasets", "stages.joblog", "dynamics.kernels"} <= package_imports(
        "stages.simulate"
    )
    assert {"analysis.particle_budget", "dynamics.integrate", "config.experiment"} <= package_imports("config.studies")
    assert package_imports("transport.assignment") == {"transport.limits", "transport.simplex"}
    assert layer_violations({"model.matrices": {"dynamics.kernels"}}) == [
        "model.matrices imports dynamics.kernels (layer dynamics comes after model)"
    ]
    assert layer_violations({"config.resources": {"stages.convergence"}})
    assert not layer_violations({"stages.fit": {"analysis.claims", "store"}})


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
    """What the Snakefile parses: every module of lowtemp.config, and nothing heavy comes with them."""
    config = ", ".join(f"lowtemp.{m}" for m in MODULES if m.startswith("config."))
    assert _heavy_after(config) == []
    # the probe itself sees a heavy import: the stage that simulates loads numba
    assert "numba" in _heavy_after("lowtemp.stages.simulate")


def test_transport_limits_load_no_numba():
    assert _heavy_after("lowtemp.transport.limits") == []


def test_figures_load_neither_numba_nor_pot():
    assert not {"numba", "ot"} & set(_heavy_after("lowtemp.stages.figures"))


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


def test_every_rule_has_its_stage_function():
    """``rule X`` in workflow/rules/F.smk runs ``lowtemp.stages.F.stage_X`` (the map rule → function is one
    hop); rules without a script (aggregating targets) have none."""
    rules = Path(__file__).resolve().parents[2] / "workflow" / "rules"
    found = 0
    for smk in sorted(rules.glob("*.smk")):
        text = smk.read_text(encoding="utf-8")
        for rule, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", text, flags=re.M):
            if "script:" not in body:
                continue
            stage = ast.parse((PACKAGE / "stages" / f"{smk.stem}.py").read_text(encoding="utf-8"))
            names = {n.name for n in stage.body if isinstance(n, ast.FunctionDef)}
            assert f"stage_{rule}" in names, f"rule {rule} ({smk.name}): no lowtemp.stages.{smk.stem}.stage_{rule}"
            found += 1
    assert found >= 12


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
