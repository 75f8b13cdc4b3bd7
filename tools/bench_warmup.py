"""Warm-up benchmark: the first request's TTFT right after ready, with and without warm-up.

Starts `python -m entrypoint` twice on the tiny CPU model (SPARKSERVE_WARMUP=on, then
off). As soon as `/ready` answers 200 it sends one streamed chat request (the first
request a user would send) and then N more of the same shape; TTFT is the time from
sending to the first streamed event (vLLM sends its first chunk once the first token
exists). Each prompt starts with its own number, so no two share a cached prefix.
Prints both runs side by side. A benchmark, not a test: numbers depend on the machine.

    python -m tools.bench_warmup [--requests N] [--prompt-words W] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from bench.launcher import free_port
from devtools.interrupt import run_interruptible
from devtools.tiny_model import write_tiny_model

READY_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 60.0
POLL_S = 0.05
SERVED_MODEL = "tiny"
PROMPT_WORDS = (
    "the budget planner sizes the key value cache so every request fits in memory and the "
    "gateway keeps each tenant prefix warm on one replica while the entrypoint supervises vllm"
).split()
# The tiny-model serving settings the entrypoint's vLLM tests use (docs/entrypoint.md).
SERVING_ENV = {
    "SPARKSERVE_SERVED_MODEL_NAME": SERVED_MODEL,
    "SPARKSERVE_HOST": "127.0.0.1",
    "SPARKSERVE_KV_CACHE_MEMORY_BYTES": "256M",
    "SPARKSERVE_MAX_MODEL_LEN": "4096",
    "SPARKSERVE_MAX_NUM_SEQS": "4",
    "SPARKSERVE_MAX_NUM_BATCHED_TOKENS": "512",
    "SPARKSERVE_VLLM_EXTRA_ARGS": "--load-format dummy --enforce-eager",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class RunResult:
    """One entrypoint start: launch → ready, then the first and the steady-state TTFTs."""

    warmup: bool
    ready_seconds: float
    first_ttft_seconds: float
    steady_ttft_seconds: list[float] = field(default_factory=list)

    @property
    def steady_median_seconds(self) -> float:
        return statistics.median(self.steady_ttft_seconds)

    @property
    def first_over_median(self) -> float:
        return self.first_ttft_seconds / self.steady_median_seconds


def render_table(results: Sequence[RunResult]) -> str:
    """The side-by-side table (one row per run)."""
    n = len(results[0].steady_ttft_seconds) if results else 0
    header = (
        f"{'warm-up':<8} {'launch → ready':>15} {'first TTFT':>11} "
        f"{f'steady TTFT (median of {n})':>28} {'first / steady':>15}"
    )
    rows = [header, "-" * len(header)]
    for r in results:
        rows.append(
            f"{'on' if r.warmup else 'off':<8} {r.ready_seconds:>13.1f} s "
            f"{r.first_ttft_seconds * 1000:>8.1f} ms {r.steady_median_seconds * 1000:>25.1f} ms "
            f"{r.first_over_median:>14.2f}x"
        )
    return "\n".join(rows)


def prompt(number: int, words: int) -> str:
    body = " ".join(PROMPT_WORDS[i % len(PROMPT_WORDS)] for i in range(words))
    return f"request {number}: {body}"


def ttft_seconds(client: httpx.Client, text: str, max_tokens: int) -> float:
    """Seconds from sending a streamed chat request to its first event (read to the end)."""
    body = {
        "model": SERVED_MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    started = time.perf_counter()
    first: float | None = None
    with client.stream("POST", "/v1/chat/completions", json=body) as answer:
        answer.raise_for_status()
        for line in answer.iter_lines():
            if first is None and line.startswith("data:"):
                first = time.perf_counter() - started
    if first is None:
        raise RuntimeError("the streamed answer had no events")
    return first


class Entrypoint:
    """`python -m entrypoint` in its own session, its output in a log file."""

    def __init__(self, model_dir: Path, warmup: bool, log_path: Path) -> None:
        self.port, self.control_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKSERVE_")}
        env.update(SERVING_ENV)
        env.update(
            SPARKSERVE_MODEL=str(model_dir),
            SPARKSERVE_PORT=str(self.port),
            SPARKSERVE_CONTROL_PORT=str(self.control_port),
            SPARKSERVE_WARMUP="on" if warmup else "off",
        )
        self.log_path = log_path
        with log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "entrypoint"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        url = f"http://127.0.0.1:{self.control_port}/ready"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"entrypoint exited {self.proc.returncode}; see {self.log_path}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(POLL_S)
        raise RuntimeError(f"not ready after {READY_TIMEOUT_S:g} s; see {self.log_path}")

    def stop(self) -> None:
        """SIGTERM (the entrypoint stops vLLM), SIGKILL of its POSIX session if that hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def measure(model_dir: Path, warmup: bool, args: argparse.Namespace, log_dir: Path) -> RunResult:
    started = time.monotonic()
    entrypoint = Entrypoint(model_dir, warmup, log_dir / f"entrypoint-warmup-{warmup}.log")
    try:
        entrypoint.wait_ready()
        ready = time.monotonic() - started
        url = f"http://127.0.0.1:{entrypoint.port}"
        with httpx.Client(base_url=url, timeout=300) as client:
            first = ttft_seconds(client, prompt(0, args.prompt_words), args.max_tokens)
            steady = [
                ttft_seconds(client, prompt(i, args.prompt_words), args.max_tokens)
                for i in range(1, args.requests + 1)
            ]
    finally:
        entrypoint.stop()
    return RunResult(warmup, ready, first, steady)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_warmup", description=__doc__)
    parser.add_argument("--requests", type=int, default=10, help="steady-state requests (N)")
    parser.add_argument("--prompt-words", type=int, default=300, help="words per prompt")
    parser.add_argument("--max-tokens", type=int, default=8, help="tokens generated per request")
    parser.add_argument("--model-dir", type=Path, help="model directory (default: tiny dense)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument(
        "--log-dir", type=Path, default=Path("run/bench-warmup"), help="entrypoint logs"
    )
    args = parser.parse_args(argv)
    for name in ("requests", "prompt_words", "max_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be ≥ 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_interruptible("bench_warmup", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    args.log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-warmup-") as tmp:
        model_dir = args.model_dir or write_tiny_model(Path(tmp) / "dense", "dense")
        results = [measure(model_dir, warmup, args, args.log_dir) for warmup in (True, False)]
    print(render_table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
