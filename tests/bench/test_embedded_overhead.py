"""`python -m bench.embedded_overhead` (`make bench-gateway-embedded`): one vLLM with the
gateway inside it, raced with and without it, as a user runs it."""

from __future__ import annotations

import os
import re
import subprocess

import psutil
import pytest

from bench.embedded_overhead import bench_args
from bench.gateway_overhead import _parse_args
from tests.bench.overhead_cli import run_module


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run_module("bench.embedded_overhead", *args, timeout=timeout)


def test_what_it_sets_itself_is_refused_clearly() -> None:
    done = _run("--vllm-url", "http://127.0.0.1:9", timeout=60)
    assert done.returncode != 0 and "starts its own vLLM" in done.stderr
    assert "drop --vllm-url" in done.stderr and "Traceback" not in done.stderr


def test_a_bypass_token_that_starts_with_a_dash_still_parses() -> None:
    """`secrets.token_urlsafe` starts one token in 64 with "-" (CI once drew one): it must
    reach the bench as the token, not as an unknown flag."""
    token = "-Xy_" + "a" * 28
    pid = os.getpid()  # --server-pid must name a running process
    args = _parse_args(bench_args("http://127.0.0.1:9", token, pid, ["--rounds", "2"]))
    assert (args.embedded_bypass, args.server_pid, args.rounds) == (token, pid, 2)


@pytest.mark.vllm
def test_races_the_embedded_gateway_against_the_same_vllm() -> None:
    """A short run (one vLLM start): every path streams every token, the ratios and the
    verdicts are printed for the embedded path, and vLLM is gone afterwards.  With
    `--spin`, vLLM runs the spinning class: 50 ms spun on its loop per request put the
    spinning path's first tokens 50-100 ms behind the embedded path's (a stall of
    vLLM in one round does not hide that), and the line through them slopes up; the
    burst's first token waits for both requests' spins.  `--unturned` adds the path
    without the loop's turn before the handover, its work timed apart.  Each round is
    charged the CPU of vLLM's API server process, which sees the spin; `--additions` races
    vLLM sent what the gateway adds, round the gateway."""
    done = _run(
        "--concurrency",
        "2",
        "--rounds",
        "2",
        "--events",
        "8",
        "--spin",
        "50000",
        "--unturned",
        "--additions",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^\s*2\s+embedded/d pair\s+[\d.]+", out, re.M), out
    assert "failed" not in out, out
    assert re.search(r"embedded ttft p50 <= 1\.05x (met|missed|undecided)", out), out
    rows = {m[1]: float(m[2]) for m in re.finditer(r"^\s*2\s+(\S+)\s+([\d.]+)", out, re.M)}
    assert rows["embedded+50000us"] > rows["embedded"] + 25, out  # TTFT p50, ms
    slope = re.search(r"\(embedded, embedded\+50000us\): .* per request (-?[\d.]+)", out)
    assert slope is not None and float(slope[1]) > 0, out
    timed = re.search(r"own CPU before the handover, on vLLM's loop .*: mean ([\d.]+) us", out)
    assert timed is not None and 0 < float(timed[1]) < 50000, out  # the spin is not in it
    unturned = re.search(r"handover, unturned, on .*: mean ([\d.]+) us, p50 \S+ us over (\d+)", out)
    assert unturned is not None and 0 < float(unturned[1]) < 50000, out
    assert int(unturned[2]) >= 2 * 2, out  # its two streams in each measured round
    assert re.search(r"^\s*2\s+embedded-unturned/d pair\s+[\d.]+", out, re.M), out
    assert "own CPU per request (before vLLM's handler, on its loop)" in out, out
    # The burst's first token waits until vLLM's loop has taken up both requests: both
    # spins, ~50 ms per stream (only its own would be 25 ms).
    burst = re.search(r"^\s*embedded\+50000us\s+[\d.]+\s+[\d.]+\s+.+?\s+(\d+)\s+\d+%$", out, re.M)
    assert burst is not None and int(burst[1]) > 37500, out
    assert "the line through embedded, embedded+50000us" in out, out
    # vLLM's API server is charged each round: the 50 ms spun per request on its loop is
    # CPU that process ran, ~50,000 µs a stream more than the embedded path beside it.
    cpu = out[out.index("vLLM's API server CPU") :]
    per_stream = {m[1]: int(m[2]) for m in re.finditer(r"^\s*(\S+)\s+(\d+)", cpu, re.M)}
    assert per_stream["direct"] > 0, cpu
    assert 45000 < per_stream["embedded+50000us"] - per_stream["embedded"] < 60000, cpu
    assert per_stream["direct+additions"] > 0, cpu  # vLLM sent the gateway's additions
    left = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if any("embedded-overhead-" in part for part in p.info["cmdline"] or [])
    ]
    assert left == []
