"""The packages are layered: no import cycle among budget, entrypoint, gateway, draftvocab,
bench, reliability and devtools (module by module, imports inside functions included),
and the product (what the wheel and the images hold) never imports the checkout's
development packages."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("budget", "entrypoint", "gateway", "draftvocab")
DEVELOPMENT = ("bench", "reliability", "devtools")
PACKAGES = (*PRODUCT, *DEVELOPMENT)
NEVER_IN_THE_PRODUCT = {*DEVELOPMENT, "tools", "tests"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, ast.Module]:
    return {
        _module_name(path): ast.parse(path.read_text(), str(path))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _imported(tree: ast.Module) -> set[str]:
    """Every absolute name an import statement anywhere in the module names: `import a.b`
    gives a.b, `from a import b` gives a.b (a module or a name in a)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _resolve(name: str, modules: set[str]) -> str | None:
    """The module of `modules` a name lives in: itself or its nearest parent."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _graph() -> dict[str, set[str]]:
    trees = _modules()
    names = set(trees)
    graph: dict[str, set[str]] = {}
    for module, tree in trees.items():
        targets = {_resolve(name, names) for name in _imported(tree)}
        graph[module] = {target for target in targets if target and target != module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        return list(exc.args[1])
    return []


def test_no_relative_imports() -> None:
    """The graph reads absolute imports only; the code uses nothing else."""
    for module, tree in _modules().items():
        relative = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
        assert not relative, f"{module}: relative import"


def test_no_import_cycle_among_the_modules() -> None:
    cycle = _cycle(_graph())
    assert not cycle, f"import cycle: {' → '.join(cycle)}"


def test_no_import_cycle_among_the_packages() -> None:
    packages: dict[str, set[str]] = {package: set() for package in PACKAGES}
    for module, targets in _graph().items():
        top = module.split(".")[0]
        packages[top] |= {target.split(".")[0] for target in targets} - {top}
    cycle = _cycle(packages)
    assert not cycle, f"import cycle between packages: {' → '.join(cycle)}"


def test_the_product_never_imports_development_packages() -> None:
    for module, tree in _modules().items():
        if module.split(".")[0] not in PRODUCT:
            continue
        named = {name.split(".")[0] for name in _imported(tree)} & NEVER_IN_THE_PRODUCT
        assert not named, f"{module} imports {sorted(named)}"


def test_the_graph_sees_imports_inside_functions() -> None:
    """The checks above would miss a cycle hidden in a function-local import otherwise."""
    tree = ast.parse("def f() -> None:\n    from bench.cli import main\n")
    assert _imported(tree) == {"bench.cli.main"}
    assert _resolve("bench.cli.main", {"bench", "bench.cli"}) == "bench.cli"
