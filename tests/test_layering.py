"""The package's structure: each module imports alone, the imports form no cycle, no module
imports Snakemake, the figures load neither numba nor POT, no import hides inside a function,
and every public function and class says what it does."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workflow" / "lowtemp"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def _tree(module: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))


def _package_imports(module: str) -> set[str]:
    """The package's modules that ``module`` imports at top level (``from . import x``, ``from .x import y``)."""
    out = set()
    for node in _tree(module).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                out.update(alias.name for alias in node.names if alias.name in MODULES)
            else:
                out.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lowtemp."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("lowtemp."))
    return out & set(MODULES)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_every_module_imports_alone():
    """Each module in a fresh interpreter: nothing relies on another module having been imported first."""
    code = "; ".join(f"import subprocess, sys; r = subprocess.run([sys.executable, '-c', 'import lowtemp.{m}'], "
                     f"capture_output=True, text=True); print('{m}', r.returncode, r.stderr[-400:].replace(chr(10), ' '))"
                     for m in MODULES)
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    failed = [line for line in proc.stdout.splitlines() if line.split()[1] != "0"]
    assert not failed, failed


def test_no_import_cycle():
    graph = {m: _package_imports(m) for m in MODULES}
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


def test_the_graph_sees_the_imports():
    """The cycle check reads the real imports (a parser that found none would pass it vacuously)."""
    assert {"experiment", "datasets", "joblog", "kernels"} <= _package_imports("pipeline")
    assert "pipeline" not in _package_imports("convergence") | _package_imports("validation")


def test_no_module_imports_snakemake():
    for m in MODULES:
        for node in ast.walk(_tree(m)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "snakemake" for n in names), (m, names)
    proc = _run("import sys, lowtemp.validation, lowtemp.pipeline, lowtemp.convergence, lowtemp.resources; "
                "print('snakemake' in sys.modules)")
    assert proc.stdout.strip() == "False", proc.stderr


def test_figures_load_neither_numba_nor_pot():
    proc = _run("import sys, lowtemp.figures; print(sorted(m for m in ('numba', 'ot') if m in sys.modules))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_no_import_inside_a_function():
    for m in MODULES:
        for node in ast.walk(_tree(m)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
                assert not inner, f"{m}.{node.name} imports inside its body (line {inner[0].lineno})"


@pytest.mark.parametrize("module", ["__init__"] + MODULES)
def test_public_functions_and_classes_have_docstrings(module):
    tree = _tree(module)
    assert ast.get_docstring(tree), f"{module} has no module docstring"
    missing = [node.name for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               and not node.name.startswith("_") and not ast.get_docstring(node)]
    assert not missing, f"{module}: no docstring on {missing}"
