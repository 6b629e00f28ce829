"""The package's shape: small public functions, numba kernels with a few structured arguments, modules of one
concern. Each limit is checked on every module of ``workflow/lowtemp`` and on a made-up source that breaks it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "workflow" / "lowtemp"
#: every module of the package (its subpackages hold them all: tests/workflow/test_layering.py), its __init__ too
MODULES = sorted([PACKAGE / "__init__.py", *PACKAGE.glob("*/*.py")])

#: lines of a public function's body (its docstring not counted); a numba kernel's loops are exempt
MAX_FUNCTION_LINES = 60
#: parameters of a numba kernel: arrays that travel together go in one namedtuple
MAX_KERNEL_PARAMETERS = 8
#: lines of a module: one concern each
MAX_MODULE_LINES = 600


def _is_kernel(node: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in node.decorator_list)


def _body_lines(node: ast.FunctionDef) -> int:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return node.end_lineno - body[0].lineno + 1 if body else 0


def _parameters(node: ast.FunctionDef) -> int:
    a = node.args
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)


def shape_problems(source: str, where: str = "<source>") -> list[str]:
    """Every function of ``source`` that breaks a limit, and the module itself if it is too long."""
    tree = ast.parse(source)
    problems = []
    lines = source.count("\n") + (not source.endswith("\n"))
    if lines > MAX_MODULE_LINES:
        problems.append(f"{where}: {lines} lines > {MAX_MODULE_LINES}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        if _is_kernel(node) and _parameters(node) > MAX_KERNEL_PARAMETERS:
            problems.append(f"{where}:{node.lineno} kernel {node.name} takes {_parameters(node)} parameters")
        if not _is_kernel(node) and not node.name.startswith("_") and _body_lines(node) > MAX_FUNCTION_LINES:
            problems.append(f"{where}:{node.lineno} {node.name} has {_body_lines(node)} lines")
    return problems


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}.{p.stem}")
def test_every_module_keeps_the_limits(path):
    assert shape_problems(path.read_text(), str(path.relative_to(PACKAGE))) == []


def _function(lines: int, name: str = "public") -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines))
    return f'def {name}():\n    """Doc."""\n{body}'


def test_a_long_public_function_is_caught_and_its_docstring_is_not_counted():
    assert shape_problems(_function(MAX_FUNCTION_LINES)) == []
    assert shape_problems(_function(MAX_FUNCTION_LINES + 1)) == ["<source>:1 public has 61 lines"]
    assert shape_problems(_function(MAX_FUNCTION_LINES + 1, "_private")) == []


def test_a_wide_numba_kernel_is_caught_and_a_long_one_is_not():
    wide = "@numba.njit(cache=True)\ndef _k(" + ", ".join(f"a{i}" for i in range(MAX_KERNEL_PARAMETERS + 1)) + "):\n"
    assert shape_problems(wide + "    pass\n") == ["<source>:2 kernel _k takes 9 parameters"]
    narrow = "@numba.njit(parallel=True)\ndef kernel(arrays, out):\n" + _function(100).split("\n", 2)[2]
    assert shape_problems(narrow) == []


def test_a_long_module_is_caught():
    source = "\n".join(f"x{i} = {i}" for i in range(MAX_MODULE_LINES + 1)) + "\n"
    assert shape_problems(source) == [f"<source>: {MAX_MODULE_LINES + 1} lines > {MAX_MODULE_LINES}"]
