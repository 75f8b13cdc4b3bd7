"""The control endpoint over a real socket: /ready follows the lifecycle, /metrics the plan."""

import httpx
import pytest

from entrypoint.control import ControlServer
from entrypoint.hardware import HostMemory
from entrypoint.logscan import LogWatcher
from entrypoint.metrics import build_registry
from entrypoint.state import READY, STOPPING, WARMING_UP, Lifecycle

HOST = HostMemory(total_bytes=8 * 1024**3, available_bytes=4 * 1024**3, free_bytes=3 * 1024**3)


@pytest.fixture
def control(tiny_plan):
    lifecycle, watcher = Lifecycle(), LogWatcher()
    registry = build_registry(
        tiny_plan, watcher, lifecycle, {"model": "dense"}, read_gpus=list, read_host=lambda: HOST
    )
    server = ControlServer("127.0.0.1", 0, lifecycle, registry)
    server.start()
    yield server, lifecycle, watcher, registry
    server.close()


def _get(server, path):
    return httpx.get(f"http://127.0.0.1:{server.port}{path}", timeout=5)


def test_ready_is_503_until_ready_and_again_while_stopping(control):
    server, lifecycle, _, _ = control
    assert _get(server, "/ready").status_code == 503
    lifecycle.update(phase=WARMING_UP)
    assert _get(server, "/ready").json() == {"ready": False, "phase": "warming_up"}
    lifecycle.update(phase=READY)
    assert _get(server, "/ready").status_code == 200
    lifecycle.update(phase=STOPPING)
    assert _get(server, "/ready").status_code == 503


def test_ready_drops_when_vllm_stops_answering(control):
    server, lifecycle, _, _ = control
    lifecycle.update(phase=READY)
    lifecycle.health(answered=False)
    assert _get(server, "/ready").status_code == 503
    lifecycle.health(answered=True)
    assert _get(server, "/ready").status_code == 200


def test_metrics_show_planned_then_observed(control, tiny_plan):
    server, _, watcher, registry = control
    value = registry.get_sample_value
    assert value("sparkserve_budget_kv_tokens", {"source": "planned"}) == tiny_plan.kv_cache_tokens
    assert value("sparkserve_budget_kv_tokens", {"source": "observed"}) is None
    watcher.feed(
        "CPU KV cache size: 262,144 tokens, Maximum concurrency for 4,096 tokens per "
        "request: 64.00x"
    )
    assert value("sparkserve_budget_kv_tokens", {"source": "observed"}) == 262144
    assert value("sparkserve_budget_max_concurrency", {"source": "observed"}) == 64.0
    assert value("sparkserve_budget_bytes", {"component": "kv_cache"}) == tiny_plan.kv_cache_bytes
    text = _get(server, "/metrics").text
    assert 'sparkserve_budget_kv_tokens{source="observed"} 262144.0' in text
    assert "sparkserve_ready 0.0" in text
    assert 'sparkserve_host_memory_bytes{kind="total"}' in text


def test_warmup_metrics(control):
    _, lifecycle, _, registry = control
    lifecycle.add_warmup_step("chat", 0.5)
    lifecycle.update(warmup_seconds=2.0, phase=READY)
    assert registry.get_sample_value("sparkserve_warmup_seconds") == 2.0
    assert registry.get_sample_value("sparkserve_warmup_step_seconds", {"step": "chat"}) == 0.5
    assert registry.get_sample_value("sparkserve_ready") == 1.0


def test_unknown_path_is_404(control):
    assert _get(control[0], "/nope").status_code == 404


def test_scraper_that_hangs_up_leaves_no_traceback(control, capsys):
    """A Prometheus scrape that times out closes its socket mid-answer (RST)."""
    import socket
    import struct
    import time

    server, *_ = control
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.close()  # linger 0: reset, the server's write fails
    time.sleep(0.5)
    assert "Traceback" not in capsys.readouterr().err
    assert _get(server, "/ready").status_code == 503  # still serving
