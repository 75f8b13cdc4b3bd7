"""The recorded H200 run of `tools/ray_tp2.sh run` on a host with two
H200s, 2026-11-29. The head role started Ray, waited
for both GPUs, launched the real CUDA vLLM 0.24.0 through its Ray executor with TP 2,
served a chat request, and stopped vLLM and Ray on SIGTERM. The log is the
entrypoint's whole output as it was; these tests read it, not the code that wrote it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from entrypoint.logscan import LogWatcher

RUN = Path(__file__).parent / "fixtures" / "gpu_h200x2_ray_tp2"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def log() -> list[str]:
    return (RUN / "entrypoint.log").read_text().splitlines()


def ours(log: list[str]) -> list[str]:
    return [line.removeprefix("[sparkserve] ") for line in log if line.startswith("[sparkserve] ")]


def vllm(log: list[str]) -> list[str]:
    return [line.removeprefix("[vllm] ") for line in log if line.startswith("[vllm] ")]


def index_of(lines: list[str], needle: str) -> int:
    found = [i for i, line in enumerate(lines) if needle in line]
    assert found, f"{needle!r} not in the run's log"
    return found[0]


def test_the_head_waits_for_both_gpus_then_launches_vllm_through_ray(log):
    lines = ours(log)
    order = [
        "waiting for 1 node(s) and 2 GPU(s)",
        "starting Ray:",
        "(2 GPU): all joined",
        "launching vLLM:",
        "phase: ready after",
        "received SIGTERM",
        "stopping Ray",
        "Ray stopped",
    ]
    positions = [index_of(lines, needle) for needle in order]
    assert positions == sorted(positions)
    launch = lines[index_of(lines, "launching vLLM:")]
    assert "RAY_ADDRESS=127.0.0.1:6379" in launch
    assert "--tensor-parallel-size 2" in launch
    assert "--distributed-executor-backend ray" in launch


def test_vllm_ran_two_ray_workers_one_per_tp_rank(log):
    plain = [ANSI.sub("", line) for line in vllm(log)]
    ranks = {m[1] for line in plain if (m := re.search(r"world_size=2 rank=(\d)", line))}
    assert ranks == {"0", "1"}
    workers = {m[1] for line in plain if (m := re.search(r"RayWorkerProc pid=(\d+)", line))}
    assert len(workers) == 2
    assert any("Worker_TP1" in line for line in plain)


def test_ray_stopped_on_sigterm_without_sigkill(log):
    lines = ours(log)
    assert "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0" in lines[index_of(lines, "starting Ray:")]
    assert not [line for line in lines if "still running" in line or "SIGKILL (code" in line]
    assert "vLLM stopped (exit code 0)" in lines[index_of(lines, "vLLM stopped")]


def test_the_chat_request_was_served_and_ray_saw_both_gpus_in_use():
    chat = json.loads((RUN / "chat.json").read_text())
    assert chat["usage"]["completion_tokens"] == 16 and chat["choices"][0]["finish_reason"]
    status = (RUN / "ray_status.txt").read_text().split("=== ray status (serving")[1]
    assert "2.0/2.0 GPU" in status


def test_logscan_reads_the_ray_prefixed_lines_of_both_ranks(log):
    """The numbers vLLM logged through Ray's worker prefixes (with colour codes)."""
    raw = vllm(log)
    kv = [
        int(m[1].replace(",", ""))
        for line in raw
        if (m := re.search(r"KV cache size: ([\d,]+)", line))
    ]
    loads = [float(m[1]) for line in raw if (m := re.search(r"loading took ([\d.]+) GiB", line))]
    assert len(kv) == 1 and len(loads) == 2  # the engine sizes once; each rank loads its half

    watcher = LogWatcher()
    phases = [phase for line in raw for phase in watcher.feed(line)]
    seen = watcher.snapshot()
    assert seen.kv_cache_tokens == kv[0]
    assert seen.weights_bytes == round(loads[-1] * 2**30)
    assert seen.cudagraph_bytes is not None and seen.max_concurrency is not None
    weights = [p for p in phases if p.startswith("weights loaded")]
    assert weights == [f"weights loaded ({loads[0]:.2f} GiB)"]  # two ranks, reported once
    assert len([p for p in phases if p.startswith("CUDA graphs captured")]) == 1
