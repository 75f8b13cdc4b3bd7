"""The prefix-stable layout's switches and its counter, through the gateway in front of
the synthetic vLLM: on by default (the header says what moved, `gateway_layout_rewrites_total`
counts it by kind), off per request (`x-sparkserve-layout: off`) and off for the whole
gateway (`GATEWAY_LAYOUT=off`), where vLLM gets the client's messages and tools as sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.standalone.app import create_app
from tests.gateway.conftest import MakeSettings, auth
from tests.gateway.fake_vllm import FakeVLLM
from tests.gateway.server import serve

SYSTEM = "You are terse. Current time: 2026-12-02T06:50:11Z. Request id 0f3c2a9b7e6d4c1a8b5e."
TOOLS = [
    {"type": "function", "function": {"name": "zeta", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "alpha", "parameters": {"type": "object"}}},
]
BODY: dict[str, Any] = {
    "model": "tiny",
    "max_tokens": 2,
    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
    "tools": TOOLS,
}


def _serve(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings, **settings: Any
) -> Iterator[tuple[str, CollectorRegistry]]:
    registry = CollectorRegistry()
    with serve(create_app(make_settings(fake_vllm[1], **settings), registry=registry)) as url:
        yield url, registry


@pytest.fixture
def layout_on(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings
) -> Iterator[tuple[str, CollectorRegistry]]:
    yield from _serve(fake_vllm, make_settings)


def _rewrites(registry: CollectorRegistry) -> dict[str, float]:
    return {
        sample.labels["kind"]: sample.value
        for family in registry.collect()
        if family.name == "gateway_layout_rewrites"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def test_on_by_default_the_header_and_the_counter_say_what_moved(
    fake_vllm: tuple[FakeVLLM, str], layout_on: tuple[str, CollectorRegistry]
) -> None:
    url, registry = layout_on
    answer = httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=auth())
    assert answer.status_code == 200
    header = answer.headers["x-sparkserve-layout"]
    assert header.startswith("moved=") and "tools=sorted" in header
    sent = fake_vllm[0].requests[-1]
    assert "2026-12-02T06:50:11Z" not in sent["messages"][0]["content"]
    assert [t["function"]["name"] for t in sent["tools"]] == ["alpha", "zeta"]
    moved_part, tools_part = header.split(";")
    expected = {kind: float(n) for kind, n in (p.split(":") for p in moved_part[6:].split(","))}
    expected["tools_sorted"] = 1.0
    if "canonical" in tools_part:
        expected["schemas_canonical"] = 1.0
    counted = _rewrites(registry)
    assert counted == expected  # the counter says what the header says
    # ...which is what SYSTEM and TOOLS hold: one timestamp, one long hex request id, and
    # tools out of order.
    assert (counted["timestamp"], counted["hex_id"], counted["tools_sorted"]) == (1, 1, 1)


def test_off_for_one_request_by_its_header(
    fake_vllm: tuple[FakeVLLM, str], layout_on: tuple[str, CollectorRegistry]
) -> None:
    url, registry = layout_on
    headers = {**auth(), "x-sparkserve-layout": "OFF"}
    answer = httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=headers)
    assert answer.status_code == 200 and answer.headers["x-sparkserve-layout"] == "off"
    sent = fake_vllm[0].requests[-1]
    assert sent["messages"] == BODY["messages"] and sent["tools"] == TOOLS
    assert _rewrites(registry) == {}


def test_off_for_the_whole_gateway(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings
) -> None:
    for url, registry in _serve(fake_vllm, make_settings, layout="off"):
        answer = httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=auth())
        assert answer.status_code == 200 and answer.headers["x-sparkserve-layout"] == "off"
        sent = fake_vllm[0].requests[-1]
        assert sent["messages"] == BODY["messages"] and sent["tools"] == TOOLS
        assert _rewrites(registry) == {}
