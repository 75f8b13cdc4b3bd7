"""One measured `python -m entrypoint` start on a GPU host.

Starts the entrypoint with the default profile's configuration (the tuning article's) on
the Qwen3-Next-shaped `hybrid` model of tools/gpu/make_models.py (MTP 3, FULL_DECODE_ONLY
with (K+1)×S capture sizes, 4 sequences, chunk 2,048, dummy weights), its compile caches
in SPARKSERVE_CACHE_DIR, and records its whole output with each line's seconds since
launch (`+12.34s line`).
Once `/ready` answers 200 it measures the first request against steady state
(tools/gpu/first_request.py), reads the control endpoint's /metrics (NVML), optionally
runs every dashboard query through Prometheus (tools/gpu/dashboards_h200.py), then
stops the entrypoint with SIGTERM. Files under --out: `<tag>.log`, `<tag>.first.json`,
`<tag>.control_metrics.txt`, `<tag>.dashboards.json`; one line each in summary.txt.

    python -m tools.gpu.entrypoint_start --tag cold --warmup on --out DIR [--dashboards]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO

import httpx

from tools.gpu import first_request

MODEL_DIR = "/tmp/gpumodels/hybrid"
CACHE_DIR = "/tmp/sscache"
# The default profile's configuration (docs/budget.md) on the hybrid model.
ARTICLE_ENV = {
    "SPARKSERVE_MODEL": MODEL_DIR,
    "SPARKSERVE_HARDWARE": "h200",
    "SPARKSERVE_DEVICE": "cuda",
    "SPARKSERVE_MTP": "3",
    "SPARKSERVE_MAX_NUM_SEQS": "4",
    "SPARKSERVE_MAX_NUM_BATCHED_TOKENS": "2048",
    "SPARKSERVE_CUDAGRAPH_MODE": "FULL_DECODE_ONLY",
    "SPARKSERVE_CUDAGRAPH_CAPTURE_SIZES": "4,8,12,16",
    "SPARKSERVE_SERVED_MODEL_NAME": "m",
    "SPARKSERVE_LOAD_FORMAT": "dummy",
    "SPARKSERVE_CACHE_DIR": CACHE_DIR,
}
# FlashInfer is not in the bundle (tools/gpu/build_bundle.sh); its sampler would be imported.
RUN_ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}
POLL_S = 0.1
STOP_WAIT_S = 60.0


class StampedLog:
    """Copies a child's output to a file, each line prefixed by seconds since `t0`."""

    def __init__(self, source: IO[str], path: Path, t0: float) -> None:
        self.t0 = t0
        self._source = source
        self._out = path.open("w")
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._copy, name="log", daemon=True)
        self._thread.start()

    def _write(self, text: str) -> None:
        with self._lock:
            self._out.write(f"+{time.monotonic() - self.t0:.2f}s {text}\n")
            self._out.flush()

    def _copy(self) -> None:
        for line in self._source:
            self._write(line.rstrip())

    def mark(self, text: str) -> None:
        """A line of this driver's own (`[driver]`), in the same log."""
        self._write(f"[driver] {text}")

    def close(self, timeout: float, last: str) -> None:
        """Copy what the child still wrote (up to `timeout` s), add `last`, close."""
        self._thread.join(timeout)
        self.mark(last)
        with self._lock:
            self._out.close()


def launch(env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[str], StampedLog]:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "entrypoint"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    return proc, StampedLog(proc.stdout, log_path, t0)


def wait_ready(proc: subprocess.Popen[str], control: str, deadline: float) -> str:
    """`ready`, `exited` or `timeout`."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "exited"
        try:
            if httpx.get(f"{control}/ready", timeout=2).status_code == 200:
                return "ready"
        except httpx.HTTPError:
            pass
        time.sleep(POLL_S)
    return "timeout"


def stop(proc: subprocess.Popen[str]) -> int:
    """SIGTERM (the entrypoint stops vLLM's group), SIGKILL of its process group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def settings(args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKSERVE_")}
    env.update(RUN_ENV)
    env.update(ARTICLE_ENV)
    env["SPARKSERVE_WARMUP"] = args.warmup
    for pair in args.env:
        key, _, value = pair.partition("=")
        env[key] = value
    return env


def nvidia_smi() -> str:
    """What nvidia-smi reads at the same moment as the control endpoint (for comparison)."""
    fields = "name,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm,utilization.gpu"
    done = subprocess.run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout.strip() or done.stderr.strip()


def after_ready(args: argparse.Namespace, log: StampedLog, ready_at: float) -> dict[str, object]:
    out: Path = args.out
    vllm, control = "http://127.0.0.1:8000", "http://127.0.0.1:8001"
    run = first_request.measure(vllm, "m", args.tag, args.steady, ready_at, args.seed)
    log.mark("first-request measurement done")
    (out / f"{args.tag}.first.json").write_text(json.dumps(asdict(run), indent=1) + "\n")
    print(first_request.render_table(run), flush=True)
    metrics = httpx.get(f"{control}/metrics", timeout=10).text
    (out / f"{args.tag}.control_metrics.txt").write_text(metrics)
    result: dict[str, object] = {"nvidia_smi": nvidia_smi()}
    result |= {
        s.shape: [round(s.ttft_ratio, 2), round(s.gap_ratio, 2)]
        for s in first_request.summarise(run)
    }
    if args.dashboards:
        from tools.gpu import dashboards_h200

        code = dashboards_h200.main(
            ["--model", "m", "--out", str(out / f"{args.tag}.dashboards.json")]
        )
        log.mark(f"dashboards done (exit {code})")
        result["dashboards_exit"] = code
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu.entrypoint_start")
    parser.add_argument("--tag", required=True, help="file names and summary label")
    parser.add_argument("--warmup", choices=("on", "off"), default="on")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline-s", type=float, default=480.0, help="launch → ready, at most")
    parser.add_argument("--steady", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dashboards", action="store_true")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE override")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _exit_on_signal)  # `timeout` ends us: stop vLLM first
    started = time.monotonic()
    proc, log = launch(settings(args), args.out / f"{args.tag}.log")
    summary: dict[str, object] = {"tag": args.tag, "state": "launched"}
    try:
        state = wait_ready(proc, "http://127.0.0.1:8001", started + args.deadline_s)
        summary.update(state=state, ready_s=round(time.monotonic() - started, 1))
        log.mark(f"driver: {state} after {summary['ready_s']} s")
        if state == "ready":
            summary.update(after_ready(args, log, time.time()))
    except (Exception, SystemExit) as exc:  # keep what was measured; say what broke
        summary["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        summary["exit_code"] = stop(proc)
        log.close(10, f"driver: entrypoint exited {summary['exit_code']}")
    line = json.dumps(summary)
    print(line, flush=True)
    with (args.out / "summary.txt").open("a") as handle:
        handle.write(line + "\n")
    return 0 if summary["state"] == "ready" and "error" not in summary else 1


if __name__ == "__main__":
    sys.exit(main())
