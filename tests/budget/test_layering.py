"""The planner's core is pure and layered: no import cycle inside budget/, no import
hidden in a function to dodge one, and host probing and file writing only at the edge."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import budget

PACKAGE = Path(budget.__file__).parent
EDGE = {"cli", "host", "chart", "__main__"}  # what may read the host or write files


def _trees() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text()) for p in sorted(PACKAGE.glob("*.py"))}


def _budget_imports(node: ast.AST) -> set[str]:
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.ImportFrom) and sub.module and sub.module.startswith("budget"):
            parts = sub.module.split(".")
            if len(parts) > 1:
                found.add(parts[1])
            else:  # from budget import parsers
                found.update(alias.name for alias in sub.names)
    return found


def test_no_import_cycle_inside_budget() -> None:
    trees = _trees()
    graph = {name: _budget_imports(tree) & set(trees) for name, tree in trees.items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle: {' → '.join(exc.args[1])}") from None


def test_no_function_local_import_of_a_budget_module() -> None:
    for name, tree in _trees().items():
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                assert not _budget_imports(func), f"budget/{name}.py: {func.name} imports inside"


def test_only_the_edge_reads_the_host_or_writes_files() -> None:
    for name, tree in _trees().items():
        if name in EDGE:
            continue
        text = ast.unparse(tree)
        for probe in (
            "/proc/cpuinfo",
            "/proc/meminfo",
            "matplotlib",
            "savefig",
            "write_text(",
            "write_bytes(",
            "subprocess",
        ):
            assert probe not in text, f"budget/{name}.py uses {probe}"
