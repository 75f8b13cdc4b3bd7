"""The gateway overhead benchmark runs end to end against its synthetic upstream and
a real `python -m gateway`, and its paired ratios are computed round by round."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from bench.gateway_overhead import stream_body
from bench.launcher import free_port
from bench.overhead_report import Round, Summary
from bench.overhead_stats import Ratios
from bench.proxies import nginx_conf, start_gateway, wait_ready
from gateway.app import preparer_of
from gateway.embedded import load_embedded_settings
from gateway.metrics import GatewayMetrics
from tests.bench.overhead_cli import run_overhead

CPU_RUN = ("--rounds", "20", "--concurrency", "8")
SMALL_RUN = ("--rounds", "2", "--concurrency", "1,4", "--events", "8", "--gap-ms", "2")

CHAT = "/v1/chat/completions"


def test_paired_ratio_ignores_a_stall_that_pooled_figures_take() -> None:
    def rounds(walls: list[float]) -> Summary:
        return Summary.of([Round([w / 10] * 4, tokens=100, wall_s=w) for w in walls])

    direct = rounds([1.0, 1.0, 1.0, 1.0, 1.0])
    path = rounds([1.1, 1.1, 5.0, 1.1, 1.1])  # one stall of the shared machine
    ratios = Ratios.of(path.runs, direct.runs)
    ttft, rate = ratios.paired_ttft_p50.value, ratios.paired_tokens_per_s.value
    assert abs(ttft - 1.1) < 1e-9 and abs(rate - 1 / 1.1) < 1e-9
    assert path.tokens_per_s / direct.tokens_per_s < 0.6  # pooled: the stall dominates


def test_failures_are_reported_by_reason_most_frequent_first() -> None:
    first, second = Round(wall_s=1.0), Round(wall_s=1.0)
    for reason in ("ServerDisconnectedError", "status 503", "ServerDisconnectedError"):
        first.failed(reason)
    second.failed("no [DONE]")
    saved_without_reasons = Round(failures=2, wall_s=1.0)  # a run saved before reasons
    summary = Summary.of([first, second, saved_without_reasons])
    assert summary.failures == 6
    assert summary.why() == "2 ServerDisconnectedError, 2 ?, 1 status 503, 1 no [DONE]"


def test_a_path_that_never_gets_ready_is_named_not_a_traceback() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(SystemExit, match=r"did not answer 200 on /health or /healthz within"):
        wait_ready(url, "/health", "/healthz", timeout_s=0.3)


def test_a_gateway_that_exits_at_start_is_named_at_once() -> None:
    """A gateway that cannot start (here: an upstream URL it refuses) ends the wait with
    its exit code, not after the whole timeout."""
    gateway, url = start_gateway("ftp://nowhere", None)
    started = time.monotonic()
    with pytest.raises(SystemExit, match=r"^the gateway at http://127\.0\.0\.1:\d+ exited \d+ "):
        wait_ready(url, "/healthz", timeout_s=120, proc=gateway, what=f"the gateway at {url}")
    assert time.monotonic() - started < 60


def test_runs_against_the_synthetic_upstream() -> None:
    done = run_overhead(*SMALL_RUN)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {
        (m[1], m[2]): m[3]
        for m in re.finditer(r"^\s*(\d+)\s+(\S+(?: pair)?)\s+(.*)$", done.stdout, re.M)
    }
    for streams in ("1", "4"):
        for path in ("direct", "gateway", "gateway/d", "gateway/d pair"):
            assert (streams, path) in rows, done.stdout
        assert "failed" not in rows[(streams, "gateway")]
        ttft_p50 = float(rows[(streams, "gateway")].split()[0])
        assert ttft_p50 > 0


def test_cpu_cost_splits_per_request_and_per_event() -> None:
    done = run_overhead("--cpu-cost", *CPU_RUN)
    assert done.returncode == 0, done.stderr[-2000:]
    row = re.search(r"^\s*gateway\s+(-?\d+)\s+(-?[\d.]+)\s*$", done.stdout, re.M)
    assert row is not None, done.stdout
    # 10 ms CPU ticks: the per-event figure (thousands of events) is solid and checked;
    # the per-request one (a difference of small tick counts) is printed, not checked.
    assert float(row[2]) > 0


def test_nginx_reference_config(tmp_path: Path) -> None:
    conf = nginx_conf(str(tmp_path), "http://127.0.0.1:18555/", 18580)
    assert "server 127.0.0.1:18555;" in conf and "listen 127.0.0.1:18580;" in conf
    # Streaming both ways, one worker like the one gateway process, no log to write.
    for line in ("proxy_buffering off;", "proxy_request_buffering off;", "worker_processes 1;"):
        assert line in conf
    assert "access_log off;" in conf and str(tmp_path) + "/nginx.pid" in conf
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if os.path.exists(nginx):  # nginx itself accepts it
        (tmp_path / "nginx.conf").write_text(conf)
        check = subprocess.run(
            [nginx, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert check.returncode == 0, check.stderr


@pytest.mark.skipif(
    not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")),
    reason="no nginx binary here (Debian: apt-get install nginx-light); --nginx is optional",
)
def test_races_nginx_against_the_synthetic_upstream() -> None:
    done = run_overhead(*SMALL_RUN, "--nginx")
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"^\s*4\s+nginx/d pair\s+[\d.]+", done.stdout, re.M), done.stdout


def test_a_malformed_also_is_refused_clearly() -> None:
    done = run_overhead("--also", "nginx:8080", "--rounds", "1")
    assert done.returncode != 0 and "expected NAME=http://host:port" in done.stderr
    assert "Traceback" not in done.stderr


def test_synthetic_upstream_outlives_a_client_that_leaves_mid_stream() -> None:
    """A proxy stopped before its upstream (as the bench stops them) leaves mid-stream:
    the upstream stops that stream quietly and goes on serving."""
    port = free_port()
    code = f"import bench.synthetic_sse as s; s.serve({port}, 400, 0.005)"
    upstream = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}", "/health")
        with socket.create_connection(("127.0.0.1", port)) as sock:
            body = b'{"stream":true}'
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")
        time.sleep(0.5)  # the stream's next events meet the closed connection
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    finally:
        upstream.terminate()
        _, err = upstream.communicate(timeout=10)
    assert "Traceback" not in err, err


def test_embedded_bypass_options_are_checked_before_anything_starts() -> None:
    cases = (
        (("--embedded-bypass", "t"), "--embedded-bypass needs --vllm-url"),
        (
            ("--vllm-url", "http://127.0.0.1:9", "--embedded-bypass", "t", "--clients", "httpx"),
            "cannot apply",
        ),
        (("--api-key", "sk-a"), "--api-key is for the embedded path"),
        (("--unturned",), "--unturned races the embedded gateway without its loop turn"),
        (("--additions",), "--additions sends vLLM what the embedded gateway adds"),
        (
            ("--vllm-url", "http://127.0.0.1:9", "--embedded-bypass", "a b;"),
            "the token may hold only letters, digits",
        ),
    )
    for args, message in cases:
        done = run_overhead(*args, "--rounds", "1")
        assert done.returncode != 0 and message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_nginx_sends_the_bypass_header_upstream(tmp_path: Path) -> None:
    conf = nginx_conf(str(tmp_path), "http://127.0.0.1:18555", 18580, {"x-sparkserve-bypass": "t"})
    assert "proxy_set_header x-sparkserve-bypass t;" in conf
    assert "x-sparkserve" not in nginx_conf(str(tmp_path), "http://127.0.0.1:18555", 18580)


def test_the_additions_body_is_what_the_gateway_hands_vllm(tmp_path: Path) -> None:
    """`--additions` sends vLLM, round the gateway, the bench's request as the embedded
    gateway hands it over: the same fields and values but for the tenant's salt, whose
    form (64 hex digits) is the gateway's."""
    plain = stream_body("tiny", 64)
    added = json.loads(stream_body("tiny", 64, additions=True))
    settings = load_embedded_settings(
        api_keys="bench:sk-bench", salt_secret="s" * 32, state_dir=tmp_path
    )
    preparer = preparer_of(settings, GatewayMetrics.create(CollectorRegistry()), embedded=True)
    headers = [(b"authorization", b"Bearer sk-bench"), (b"content-type", b"application/json")]
    scope = {"type": "http", "method": "POST", "path": CHAT, "headers": headers}

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": plain, "more_body": False}

    forward = asyncio.run(preparer.prepare(CHAT, scope, receive))
    assert forward.body is not None
    handed = json.loads(forward.body)
    assert re.fullmatch(r"[0-9a-f]{64}", handed["cache_salt"])
    assert re.fullmatch(r"[0-9a-f]{64}", added["cache_salt"])
    assert added | {"cache_salt": ""} == handed | {"cache_salt": ""}
    assert added.keys() - json.loads(plain).keys() == {"cache_salt", "stream_options"}
