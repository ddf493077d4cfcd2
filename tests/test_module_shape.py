"""The controller stays readable: no module over 700 lines and no function over 60 (issue 9)."""

from __future__ import annotations

import ast
from pathlib import Path

import iris.cluster.controller

CONTROLLER = Path(iris.cluster.controller.__file__).parent
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(CONTROLLER.rglob("*.py"))


def test_controller_modules_each_at_most_700_lines() -> None:
    too_long = {
        str(path.relative_to(CONTROLLER)): n
        for path in _modules()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }

    assert not too_long, f"split these modules (lines): {too_long}"


def test_controller_functions_each_at_most_60_lines() -> None:
    too_long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long[f"{path.relative_to(CONTROLLER)}:{node.lineno} {node.name}"] = length
    assert not too_long, f"split these functions (lines): {too_long}"


def test_module_shape_check_sees_every_controller_module() -> None:
    names = {path.name for path in _modules()}

    assert {"store.py", "reconcile.py", "scheduler.py", "job_tree.py"} <= names
