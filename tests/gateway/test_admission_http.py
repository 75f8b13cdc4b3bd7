"""429 over real sockets, and the thermal guard and memory gate reading the entrypoint's
control /metrics."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from gateway.core.thermal import hottest_gpu_celsius, throttled_limit
from gateway.standalone.app import create_app
from tests.gateway.conftest import BOB_KEY, MakeSettings, auth
from tests.gateway.fake_vllm import FakeVLLM
from tests.gateway.server import serve

STREAM = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_over_capacity_is_429_with_retry_after(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    fake, upstream = fake_vllm
    fake.hold = True
    settings = make_settings(upstream, max_concurrency=1, queue_size=0, retry_after_seconds=2)
    with serve(create_app(settings, registry=registry)) as url:
        with httpx.stream(
            "POST", f"{url}/v1/chat/completions", json=STREAM, headers=auth()
        ) as held:
            lines = held.iter_lines()  # keep it: a dropped iterator closes the connection
            next(lines)
            refused = httpx.post(f"{url}/v1/chat/completions", json=STREAM, headers=auth(BOB_KEY))
            fake.release.set()
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "2"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert registry.get_sample_value("gateway_rejected_total", {"reason": "queue_full"}) == 1


def test_per_key_limit_queues_then_serves(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    settings = make_settings(fake_vllm[1], max_concurrency_per_key=1, queue_size=4)
    with serve(create_app(settings, registry=registry)) as url:
        with httpx.Client() as client:
            replies = [
                client.post(f"{url}/v1/completions", json={"prompt": "x"}, headers=auth())
                for _ in range(3)
            ]
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert registry.get_sample_value("gateway_queue_wait_seconds_count") == 3


GPU_METRICS = """# HELP sparkserve_gpu_temperature_celsius GPU temperature.
# TYPE sparkserve_gpu_temperature_celsius gauge
sparkserve_gpu_temperature_celsius{{gpu="0"}} {t0}
sparkserve_gpu_temperature_celsius{{gpu="1"}} {t1}
"""


def test_hottest_gpu_and_throttled_limit() -> None:
    assert hottest_gpu_celsius(GPU_METRICS.format(t0=60, t1=91.5)) == 91.5
    assert hottest_gpu_celsius("other_metric 1\n") is None
    assert throttled_limit(256, 0.5) == 128 and throttled_limit(1, 0.1) == 1


MEMORY_LOW = """# HELP sparkserve_memory_low 1 while the memory watchdog refuses work.
# TYPE sparkserve_memory_low gauge
sparkserve_memory_low {low}
"""


@dataclass
class Control:
    celsius: float = 50.0
    ready: bool = False
    memory_low: int = 0

    def app(self) -> Starlette:
        async def metrics(request: Request) -> Response:
            text = GPU_METRICS.format(t0=self.celsius, t1=40)
            return PlainTextResponse(text + MEMORY_LOW.format(low=self.memory_low))

        async def ready(request: Request) -> Response:
            return Response(status_code=200 if self.ready else 503)

        return Starlette(routes=[Route("/metrics", metrics), Route("/ready", ready)])


def _wait_for(
    registry: CollectorRegistry, value: float, gauge: str = "gateway_concurrency_limit"
) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if registry.get_sample_value(gauge) == value:
            return True
        time.sleep(0.02)
    return False


def test_thermal_guard_and_readyz_follow_the_control_endpoint(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    control = Control()
    with serve(control.app()) as control_url:
        settings = make_settings(
            fake_vllm[1],
            control_url=control_url,
            max_concurrency=8,
            thermal_threshold_celsius=85,
            thermal_poll_seconds=0.02,
        )
        with serve(create_app(settings, registry=registry)) as url:
            assert httpx.get(f"{url}/readyz").status_code == 503
            control.ready = True
            assert httpx.get(f"{url}/readyz").status_code == 200
            control.celsius = 90
            assert _wait_for(registry, 4)
            control.celsius = 70
            assert _wait_for(registry, 8)


def test_memory_low_on_the_control_endpoint_is_503_for_new_work_only(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    fake, upstream = fake_vllm
    fake.hold = True
    control = Control()
    with serve(control.app()) as control_url:
        settings = make_settings(
            upstream, control_url=control_url, thermal_poll_seconds=0.02, retry_after_seconds=7
        )
        with serve(create_app(settings, registry=registry)) as url:
            chat = f"{url}/v1/chat/completions"
            with httpx.stream("POST", chat, json=STREAM, headers=auth()) as held:
                lines = held.iter_lines()
                assert next(lines).startswith("data: ")
                control.memory_low = 1
                assert _wait_for(registry, 1, "gateway_memory_low")
                refused = httpx.post(chat, json=STREAM, headers=auth(BOB_KEY))
                fake.release.set()
                rest = [line for line in lines if line]
            control.memory_low = 0
            assert _wait_for(registry, 0, "gateway_memory_low")
            fake.hold = False
            again = httpx.post(chat, json={**STREAM, "stream": False}, headers=auth(BOB_KEY))
    assert refused.status_code == 503 and refused.headers["retry-after"] == "7"
    assert refused.json()["error"]["code"] == "memory_low"
    assert rest[-1] == "data: [DONE]"  # the stream admitted before went on to its end
    assert again.status_code == 200
    assert registry.get_sample_value("gateway_rejected_total", {"reason": "memory_low"}) == 1


def test_upstream_down_is_503_then_recovers(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = make_settings(f"http://127.0.0.1:{port}", retry_after_seconds=5)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    with serve(create_app(settings, registry=registry)) as url:
        down = httpx.post(f"{url}/v1/chat/completions", json=body, headers=auth())
        assert down.status_code == 503 and down.headers["retry-after"] == "5"
        assert down.json()["error"]["code"] == "upstream_unavailable"
        assert httpx.get(f"{url}/readyz").status_code == 503
        with serve(FakeVLLM().app(), port=port):
            up = httpx.post(f"{url}/v1/chat/completions", json=body, headers=auth())
            assert up.status_code == 200
            assert httpx.get(f"{url}/readyz").status_code == 200
    assert registry.get_sample_value("gateway_upstream_errors_total", {"kind": "connect"}) == 1
