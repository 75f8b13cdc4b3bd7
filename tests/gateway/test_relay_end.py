"""The end of a stream: vLLM's last events go to the client as they arrive, whether the
end of its chunked body comes in the same read (then with the end of the response, in
one message) or later (then the end follows on its own)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.standalone.app import create_app
from tests.gateway.server import RawServer

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
FIRST = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
LAST = b'data: {"choices":[{"delta":{"content":"b"}}]}\n\ndata: [DONE]\n\n'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Upstream(RawServer):
    """A vLLM stand-in: head and first event, then the last events and the end of
    the body in one write (`together`) or in two writes 50 ms apart."""

    def __init__(self, together: bool) -> None:
        super().__init__(self.handle)
        self.together = together

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        writer.write(HEAD + _chunk(FIRST))
        await writer.drain()
        await asyncio.sleep(0.05)
        if self.together:
            writer.write(_chunk(LAST) + b"0\r\n\r\n")
        else:
            writer.write(_chunk(LAST))
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"0\r\n\r\n")
        await writer.drain()


@pytest.mark.parametrize("together", [True, False])
def test_relay_sends_the_last_events_then_the_end(make_settings, together: bool) -> None:  # type: ignore[no-untyped-def]
    async def go() -> list[dict[str, Any]]:
        upstream = _Upstream(together)
        settings = make_settings(await upstream.start(), auth="off")
        app = create_app(settings, registry=CollectorRegistry())
        body = b'{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}'
        received = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[dict[str, Any]] = []
        done = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if received:
                return received.pop()
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 8080),
        }
        try:
            async with app.router.lifespan_context(app):  # closes its clients after
                await app(scope, receive, send)
        finally:
            done.set()
            await upstream.close()
        return sent

    sent = asyncio.run(go())
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    bodies = [(m["body"], m.get("more_body", False)) for m in sent[1:]]
    assert b"".join(body for body, _ in bodies) == FIRST + LAST
    # Each read goes out as it came, never held for the end.
    if together:
        assert bodies == [(FIRST, True), (LAST, False)]
    else:
        assert bodies == [(FIRST, True), (LAST, True), (b"", False)]
