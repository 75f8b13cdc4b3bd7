"""Record, without importing vLLM, the names the draft-vocab plugin relies on in one vLLM
release: read its source with `ast` from a wheel (or an installed `vllm` package folder)
and write them as JSON (tests/draftvocab/fixtures/, read by test_plugin.py).

    python tests/draftvocab/record_vllm_names.py SOURCE --out FILE.json

SOURCE: a vLLM wheel (`vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl`), or the folder of
an installed `vllm` package (`.venv/lib/python3.11/site-packages/vllm`).

Recorded: the classes the plugin subclasses or calls (bases, the signatures of the methods
it overrides or calls, the attributes their `__init__` assigns on self, class-level
annotations), the model registry's entries for the Qwen3-Next and Qwen3.5 targets and MTP
drafters, the branches of `SpeculativeConfig.hf_config_override` that pick a Qwen MTP
drafter, the proposer's calls into the drafter (`self.model.X(...)`), the plugin entry point
group, and whether each module the plugin imports from binds the name it imports.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (file, class) → the methods recorded (None: all the class defines).
CLASSES: dict[tuple[str, str], tuple[str, ...] | None] = {
    ("vllm/model_executor/models/qwen3_next_mtp.py", "Qwen3NextMTP"): None,
    ("vllm/model_executor/models/qwen3_5_mtp.py", "Qwen3_5MTP"): None,
    ("vllm/model_executor/models/qwen3_5_mtp.py", "Qwen3_5MoeMTP"): None,
    ("vllm/model_executor/models/interfaces.py", "LocalArgmaxMixin"): None,
    ("vllm/model_executor/layers/logits_processor.py", "LogitsProcessor"): (
        "__init__", "forward", "get_top_tokens",
    ),
    ("vllm/model_executor/layers/vocab_parallel_embedding.py", "VocabParallelEmbedding"): (
        "__init__", "weight_loader",
    ),
    ("vllm/model_executor/layers/vocab_parallel_embedding.py", "ParallelLMHead"): ("__init__",),
    ("vllm/model_executor/models/registry.py", "_ModelRegistry"): ("register_model",),
}  # fmt: skip
REGISTRY = "vllm/model_executor/models/registry.py"
REGISTRY_KEYS = re.compile(r"^Qwen3(Next|_5)")
SPECULATIVE = "vllm/config/speculative.py"
PROPOSERS = ("vllm/v1/spec_decode/llm_base_proposer.py", "vllm/v1/spec_decode/eagle.py")
PLUGINS = "vllm/plugins/__init__.py"
# module file → the names the plugin (or its drafters) import from it.
IMPORTS = {
    "vllm/__init__.py": ("ModelRegistry",),
    "vllm/config/__init__.py": ("VllmConfig", "SpeculativeConfig"),
    "vllm/plugins/__init__.py": ("load_general_plugins",),
    "vllm/model_executor/models/qwen3_next_mtp.py": ("Qwen3NextMTP",),
    "vllm/model_executor/models/qwen3_5_mtp.py": ("Qwen3_5MTP", "Qwen3_5MoeMTP"),
    "vllm/model_executor/layers/logits_processor.py": ("LogitsProcessor",),
    "vllm/model_executor/layers/vocab_parallel_embedding.py": ("ParallelLMHead",),
}


def signature(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """Parameter names, kinds and defaults (no annotations): `(self, *, a, b='')`."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    parts: list[str] = []
    for index, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        parts.append(arg.arg if default is None else f"{arg.arg}={ast.unparse(default)}")
        if args.posonlyargs and index == len(args.posonlyargs) - 1:
            parts.append("/")
    if args.vararg is not None:
        parts.append(f"*{args.vararg.arg}")
    elif args.kwonlyargs:
        parts.append("*")
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        parts.append(arg.arg if kw_default is None else f"{arg.arg}={ast.unparse(kw_default)}")
    if args.kwarg is not None:
        parts.append(f"**{args.kwarg.arg}")
    return f"({', '.join(parts)})"


def self_attributes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    found: set[str] = set()
    for node in ast.walk(function):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                found.add(target.attr)
    return sorted(found)


def record_class(tree: ast.Module, name: str, methods: tuple[str, ...] | None) -> dict[str, Any]:
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    functions = {
        f.name: f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    init = functions.get("__init__")
    return {
        "bases": [ast.unparse(base) for base in node.bases],
        "methods": {
            method: signature(function)
            for method, function in sorted(functions.items())
            if methods is None or method in methods
        },
        "init_attributes": self_attributes(init) if init is not None else [],
        "class_annotations": sorted(
            n.target.id
            for n in node.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        ),
    }


def record_registry(tree: ast.Module) -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            if (
                isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and REGISTRY_KEYS.match(key.value)
                and isinstance(value, ast.Tuple)
            ):
                entries[key.value] = [ast.literal_eval(element) for element in value.elts]
    return dict(sorted(entries.items()))


def _strings(node: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def record_hf_config_override(tree: ast.Module) -> list[dict[str, Any]]:
    """Each top-level `if` of hf_config_override about a Qwen3-Next or Qwen3.5 model type:
    the model types it tests, the model type it sets, the drafter architectures it names."""
    (function,) = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == "hf_config_override"
    ]
    branches: list[dict[str, Any]] = []
    for node in function.body:
        if not isinstance(node, ast.If):
            continue
        tested = _strings(node.test)
        if not any(re.match(r"qwen3_(next|5)", s) for s in tested):
            continue
        sets: str | None = None
        for statement in node.body:
            if (
                isinstance(statement, ast.Assign)
                and ast.unparse(statement.targets[0]) == "hf_config.model_type"
                and isinstance(statement.value, ast.Constant)
            ):
                sets = str(statement.value.value)
        named = sorted({s for s in _strings(ast.Module(node.body, [])) if s.endswith("MTP")})
        branches.append({"model_types": tested, "sets_model_type": sets, "architectures": named})
    return branches


def record_model_calls(tree: ast.Module) -> dict[str, list[str]]:
    """`self.model.NAME(...)` calls: NAME → the distinct argument shapes (positional count
    and keyword names)."""
    calls: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and ast.unparse(node.func.value) == "self.model"
        ):
            keywords = [k.arg or "**" for k in node.keywords]
            shape = f"{len(node.args)} positional" + "".join(f", {k}=" for k in keywords)
            calls.setdefault(node.func.attr, set()).add(shape)
    return {name: sorted(shapes) for name, shapes in sorted(calls.items())}


def binds(tree: ast.Module, name: str) -> bool:
    """The module defines, imports or lazily exports (a string key or `__all__` entry) it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
            return True
        if isinstance(node, ast.Import | ast.ImportFrom) and any(
            (alias.asname or alias.name) == name for alias in node.names
        ):
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
        if isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value == name for k in node.keys
        ):
            return True
    return False


def record(read: Callable[[str], str]) -> dict[str, Any]:
    trees: dict[str, ast.Module] = {}

    def tree(path: str) -> ast.Module:
        if path not in trees:
            trees[path] = ast.parse(read(path), filename=path)
        return trees[path]

    plugins_group = [
        node.value.value
        for node in tree(PLUGINS).body
        if isinstance(node, ast.Assign)
        and ast.unparse(node.targets[0]) == "DEFAULT_PLUGINS_GROUP"
        and isinstance(node.value, ast.Constant)
    ]
    return {
        "classes": {
            f"{path}:{name}": record_class(tree(path), name, methods)
            for (path, name), methods in CLASSES.items()
        },
        "registry": record_registry(tree(REGISTRY)),
        "hf_config_override": record_hf_config_override(tree(SPECULATIVE)),
        "proposer_calls": {path: record_model_calls(tree(path)) for path in PROPOSERS},
        "plugins_group": plugins_group[0] if plugins_group else None,
        "imports": {
            path: {name: binds(tree(path), name) for name in names}
            for path, names in IMPORTS.items()
        },
    }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _metadata_version(text: str) -> tuple[str, str]:
    fields = dict(
        line.split(": ", 1) for line in text.splitlines() if ": " in line and line[0].isupper()
    )
    return fields.get("Name", "?"), fields.get("Version", "?")


def record_source(source: Path, shown: str | None = None) -> dict[str, Any]:
    """`shown`: the source as the recorded command names it (default: its file name)."""
    if source.is_file():
        with zipfile.ZipFile(source) as wheel:
            names = wheel.namelist()
            (meta,) = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            distribution, version = _metadata_version(wheel.read(meta).decode())
            found = record(lambda path: wheel.read(path).decode())
        origin = {"wheel": source.name, "sha256": _sha256(source)}
    else:
        metas = sorted(source.parent.glob("vllm*.dist-info/METADATA"))
        distribution, version = _metadata_version(metas[0].read_text()) if metas else ("?", "?")
        root = source.parent
        found = record(lambda path: (root / path).read_text())
        origin = {"installed_package": f"{distribution} {version}"}
        if metas:  # the installed files' own hashes (pip's RECORD), as the wheel's sha256
            origin["dist_info_RECORD_sha256"] = _sha256(metas[0].parent / "RECORD")
    return {
        "recorded_from": {
            "distribution": distribution,
            "version": version,
            **origin,
            "command": (
                f"python tests/draftvocab/record_vllm_names.py {shown or source.name} "
                f"--out tests/draftvocab/fixtures/vllm_{version}_names.json"
            ),
            "how": "read with ast, never imported",
        },
        **found,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a vLLM wheel or an installed vllm folder")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    found = record_source(args.source, str(args.source) if args.source.is_dir() else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=1, sort_keys=False) + "\n")
    print(f"{args.out}: vLLM {found['recorded_from']['version']}, {len(found['classes'])} classes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
