"""The gateway's layers, read from its source (ast): gateway/core has no I/O of its own
and knows neither face, the two faces do not import each other, and no module of the
gateway imports itself back through another."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
LAYERS = ("core", "edge", "standalone", "embedded")
# What gateway/core may not import: network clients and servers, sockets, processes.
IO_MODULES = frozenset(
    {
        "aiohttp",
        "anyio",
        "asyncio.subprocess",
        "fastapi",
        "h11",
        "httptools",
        "httpx",
        "pydantic_settings",
        "requests",
        "selectors",
        "socket",
        "ssl",
        "subprocess",
        "urllib.request",
        "uvicorn",
        "uvloop",
    }
)
# What gateway/core may not call: the environment, files, the process.
IO_CALLS = frozenset({"open", "getenv", "environ", "putenv", "read_text", "read_bytes"})


def _module_name(path: Path) -> str:
    parts = path.relative_to(GATEWAY.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, ast.Module]:
    return {
        _module_name(path): ast.parse(path.read_text(), str(path))
        for path in sorted(GATEWAY.rglob("*.py"))
    }


MODULES = _modules()


def _imports(name: str, tree: ast.Module) -> set[str]:
    """Every module `name` imports, absolute (a `from X import Y` counts `X.Y` when
    that is a module, else `X`), at any depth of its code."""
    package = name if (GATEWAY.parent / name.replace(".", "/") / "__init__.py").exists() else None
    package = package or name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(
                f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES
            )
    return found


IMPORTS = {name: _imports(name, tree) for name, tree in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "gateway" and parts[1] in LAYERS else None


def _in(layer: str) -> list[str]:
    return sorted(name for name in MODULES if _layer(name) == layer)


def test_every_layer_has_modules() -> None:
    for layer in LAYERS:
        assert len(_in(layer)) > 1, layer


@pytest.mark.parametrize("module", _in("core"))
def test_core_knows_no_face_and_no_edge(module: str) -> None:
    outside = {i for i in IMPORTS[module] if _layer(i) not in (None, "core")}
    shims = {i for i in IMPORTS[module] if i.startswith("gateway") and _layer(i) is None}
    assert outside == set() and shims - {"gateway", "gateway.core"} == set()


@pytest.mark.parametrize("module", _in("core"))
def test_core_does_no_io_of_its_own(module: str) -> None:
    imported = {i for i in IMPORTS[module] if not i.startswith("gateway")}
    io = {i for i in imported if i in IO_MODULES or i.split(".")[0] in IO_MODULES}
    assert io == set(), f"{module} imports {sorted(io)}"
    assert "os" not in imported and not any(i.startswith("os.") for i in imported), module
    calls = set()
    for node in ast.walk(MODULES[module]):
        if isinstance(node, ast.Name) and node.id in IO_CALLS:
            calls.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in IO_CALLS:
            calls.add(node.attr)
    assert calls == set(), f"{module} uses {sorted(calls)}"


@pytest.mark.parametrize("module", _in("edge"))
def test_edge_knows_no_face(module: str) -> None:
    assert {_layer(i) for i in IMPORTS[module]} <= {None, "core", "edge"}


@pytest.mark.parametrize(
    ("face", "other"), [("standalone", "embedded"), ("embedded", "standalone")]
)
def test_the_faces_do_not_import_each_other(face: str, other: str) -> None:
    crossing = {
        module: sorted(i for i in IMPORTS[module] if _layer(i) == other) for module in _in(face)
    }
    assert {m: i for m, i in crossing.items() if i} == {}


def test_no_import_cycles_inside_the_gateway() -> None:
    graph = {
        name: {i for i in imports if i in MODULES and i != name}
        for name, imports in IMPORTS.items()
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_public_names_still_resolve() -> None:
    """The names users, the entrypoint, the Dockerfile and vLLM's --middleware use."""
    import importlib

    assert callable(importlib.import_module("gateway.app").create_app)
    assert callable(importlib.import_module("gateway.embedded").EmbeddedGateway)
    assert callable(importlib.import_module("gateway.embedded").startup_check)
    assert callable(importlib.import_module("gateway.__main__").main)
    settings = importlib.import_module("gateway.settings")
    assert settings.ENV_PREFIX == "GATEWAY_" and callable(settings.load_settings)
