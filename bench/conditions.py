"""The conditions a run was measured under, each with where it came from.

Sources, strongest first: `--condition key=value` given by hand, the vLLM flags
the server was started with (`--vllm-args` or the sweep's plan), the budget
plan's settings, what the server itself exports (`/version`, `/v1/models`,
`vllm:cache_config_info`), and the state of its counters (cold or warm).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.errors import BenchError

KEYS = (
    "server_state",
    "vllm_version",
    "max_model_len",
    "graph_mode",
    "capture_sizes",
    "mtp_k",
    "draft_vocab",
    "chunk_size",
    "max_num_seqs",
    "kv_cache_dtype",
    "prefix_caching",
    "plan_kv_tokens",
    "vllm_kv_tokens",
    "block_size",
)
Parser = Callable[[str], Any]


def _json_field(key: str) -> Parser:
    def parse(raw: str) -> Any:
        try:
            return json.loads(raw).get(key)
        except (ValueError, AttributeError):
            return None

    return parse


# flag → (condition key, parser of its value)
VALUED_FLAGS: dict[str, tuple[str, Parser]] = {
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("chunk_size", int),
    "--max-model-len": ("max_model_len", int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--block-size": ("block_size", int),
    "--speculative-config": ("mtp_k", _json_field("num_speculative_tokens")),
    "--compilation-config": ("graph_mode", _json_field("cudagraph_mode")),
}
SWITCHES: dict[str, tuple[str, Any]] = {
    "--enable-prefix-caching": ("prefix_caching", True),
    "--no-enable-prefix-caching": ("prefix_caching", False),
    "--enforce-eager": ("graph_mode", "NONE"),
}


def from_vllm_args(argv: Sequence[str]) -> dict[str, Any]:
    """Conditions named by vLLM command-line flags (`--flag value` or `--flag=value`)."""
    out: dict[str, Any] = {}
    words = list(argv)
    for i, word in enumerate(words):
        flag, _, inline = word.partition("=")
        if flag in SWITCHES:
            key, value = SWITCHES[flag]
            out[key] = value
        elif flag in VALUED_FLAGS and (inline or i + 1 < len(words)):
            key, parse = VALUED_FLAGS[flag]
            raw = inline or words[i + 1]
            out[key] = parse(raw)
            if flag == "--compilation-config":
                sizes = _json_field("cudagraph_capture_sizes")(raw)
                if sizes is not None:
                    out["capture_sizes"] = sizes
    if "mtp_k" not in out and words:
        out["mtp_k"] = 0
    return {k: v for k, v in out.items() if v is not None}


def from_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """Conditions from `budget` plan JSON (`python -m budget plan --json`)."""
    settings = plan.get("settings", {})
    out = {
        "max_model_len": settings.get("max_model_len"),
        "graph_mode": settings.get("cudagraph_mode"),
        "capture_sizes": settings.get("cudagraph_capture_sizes"),
        "mtp_k": settings.get("mtp"),
        "draft_vocab": settings.get("draft_vocab_rows"),
        "chunk_size": settings.get("max_num_batched_tokens"),
        "max_num_seqs": settings.get("max_num_seqs"),
        "kv_cache_dtype": settings.get("kv_cache_dtype"),
        "prefix_caching": settings.get("prefix_caching"),
        "plan_kv_tokens": plan.get("kv_cache_tokens"),
        "block_size": plan.get("block_size"),
    }
    return {k: v for k, v in out.items() if v is not None}


def from_cache_info(info: Mapping[str, str]) -> dict[str, Any]:
    """Conditions from the labels of `vllm:cache_config_info`."""
    out: dict[str, Any] = {}
    if "cache_dtype" in info:
        out["kv_cache_dtype"] = info["cache_dtype"]
    if "enable_prefix_caching" in info:
        out["prefix_caching"] = info["enable_prefix_caching"] == "True"
    if info.get("block_size", "").isdigit():
        out["block_size"] = int(info["block_size"])
    return out


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs from --condition; values are JSON when they parse as JSON."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise BenchError(f"--condition {pair!r}; expected key=value")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def split_args(text: str | None) -> list[str]:
    return shlex.split(text) if text else []


def merge(layers: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Later layers win; returns {key: value, ..., "sources": {key: layer name}}."""
    values: dict[str, Any] = dict.fromkeys(KEYS)
    sources: dict[str, str] = {}
    for name, layer in layers:
        for key, value in layer.items():
            values[key] = value
            sources[key] = name
    values["sources"] = sources
    return values
