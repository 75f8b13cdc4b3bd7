"""bench.embedded_cost: the in-process timing of the embedded gateway."""

from __future__ import annotations

import asyncio
import re

import pytest
from prometheus_client import CollectorRegistry

from bench import embedded_cost
from bench.embedded_cost import Case, StandIn, request, split
from gateway.embedded import EmbeddedGateway
from gateway.settings import GatewaySettings


def test_split_recovers_a_known_line() -> None:
    per_request, per_event = 40.0, 2.5
    cases = [
        Case(
            tokens,
            alone_us=1.0 + tokens,
            through_us=1.0 + tokens + per_request + per_event * tokens,
        )
        for tokens in (2, 64)
    ]
    assert split(*cases) == pytest.approx((per_request, per_event))


def test_prints_the_cost_per_request_and_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    assert embedded_cost.main(["--requests", "20", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (\d+) \| ([\d.]+) \| ([\d.]+) \| (-?[\d.]+) \|$", out, re.M)
    assert [int(r[0]) for r in rows] == [embedded_cost.SHORT, embedded_cost.LONG]
    for _, alone, through, added in rows:
        assert float(through) > float(alone) > 0
        assert float(added) == pytest.approx(float(through) - float(alone), abs=0.11)
    assert re.search(r"µs per request \+ -?[\d.]+ µs per token event", out)


def test_a_gateway_that_refuses_the_request_stops_the_timing() -> None:
    """The timing counts only answered requests: a 401 (another key) is an error."""
    settings = GatewaySettings(
        upstream_url="http://vllm.embedded", api_keys="bench:sk-other", salt_secret="s"
    )
    gateway = EmbeddedGateway(StandIn(2), settings=settings, registry=CollectorRegistry())
    scope, body = request(2)
    with pytest.raises(RuntimeError, match="did not answer 200"):
        asyncio.run(embedded_cost._run(gateway, scope, body, 3))


@pytest.mark.parametrize("flag", ["--requests", "--repeats"])
def test_a_count_below_one_is_refused(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        embedded_cost.main([flag, "0"])
    assert exit_info.value.code == 2
    assert f"{flag} must be at least 1, got 0" in capsys.readouterr().err


def test_a_bad_gateway_setting_in_the_environment_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GATEWAY_MAX_CONCURRENCY", "0")
    with pytest.raises(SystemExit) as exit_info:
        embedded_cost.main(["--requests", "1", "--repeats", "1"])
    assert str(exit_info.value.code).startswith("bench.embedded_cost: GATEWAY_MAX_CONCURRENCY='0'")
