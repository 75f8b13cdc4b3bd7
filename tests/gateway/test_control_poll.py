"""The control poll (gateway/edge/control_poll.py) against a control endpoint that stalls,
then answers: each read gives up after its own timeout, not the client's, the failure is
one warning, the recovery one note, and the reading that then comes is applied."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from gateway.edge.control_poll import poll_forever, poll_timeout
from tests.gateway.server import RawServer

PERIOD_S = 0.2


class Readings:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def apply(self, metrics_text: str) -> None:
        self.texts.append(metrics_text)


def test_the_timeout_is_twice_the_period_and_at_least_a_second() -> None:
    assert poll_timeout(0.2) == 1.0
    assert poll_timeout(5) == 10.0


def test_a_stalled_endpoint_costs_one_timeout_per_read_then_its_answer_applies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stalled = 2  # requests that get no answer at all

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal stalled
        while await reader.readuntil(b"\r\n\r\n"):
            if stalled:
                stalled -= 1
                await asyncio.sleep(3600)
            body = b"sparkserve_memory_low 1\n"
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    async def go() -> tuple[Readings, float]:
        server = RawServer(handle)
        url = await server.start()
        readings = Readings()
        started = asyncio.get_running_loop().time()
        # The client's own read timeout is far longer than the poll's.
        async with httpx.AsyncClient(timeout=600) as client:
            task = asyncio.create_task(poll_forever(readings, client, url + "/metrics", PERIOD_S))
            while not readings.texts:
                await asyncio.sleep(0.05)
            took = asyncio.get_running_loop().time() - started
            task.cancel()
        await server.close()
        return readings, took

    with caplog.at_level(logging.INFO, logger="gateway.control"):
        readings, took = asyncio.run(asyncio.wait_for(go(), timeout=30))
    assert readings.texts == ["sparkserve_memory_low 1\n"]
    # Two reads of one poll timeout each, then the answer (never the client's 600 s).
    assert took >= 2 * poll_timeout(PERIOD_S)
    messages = [r.getMessage() for r in caplog.records if r.name == "gateway.control"]
    assert len(messages) == 2, messages
    assert messages[0].startswith("control poll of ") and "failed (ReadTimeout" in messages[0]
    assert messages[1].endswith("answers again")
