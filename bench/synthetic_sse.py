"""The gateway overhead benchmark's synthetic upstream: vLLM-like SSE, nothing else.

    python -c "import bench.synthetic_sse as s; s.serve(PORT, EVENTS, GAP_S)"

A tiny asyncio HTTP/1.1 server (`GET /health`, and a streamed chat answer to any
POST): `events` token events per stream, all streams ticking on one shared clock as
vLLM emits one token per running request per engine step, then the usage chunk when
the request asked for it, then `[DONE]`.  It costs little, so the gateway's own cost
shows (bench/gateway_overhead.py runs it unless given `--vllm-url`).
"""

from __future__ import annotations

import asyncio
import json
import math


def install_uvloop() -> None:
    """uvloop as asyncio's loop where it is installed (the gateway's own loop)."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


_CHUNK = {
    "id": "chatcmpl-0123456789abcdef0123456789abcdef",
    "object": "chat.completion.chunk",
    "created": 1767225600,
    "model": "tiny",
    "choices": [
        {
            "index": 0,
            "delta": {"content": " tok"},
            "logprobs": None,
            "finish_reason": None,
        }
    ],
}
EVENT = b"data: " + json.dumps(_CHUNK).encode() + b"\n\n"
USAGE_EVENT = (
    b'data: {"id":"chatcmpl-0","object":"chat.completion.chunk","created":1767225600,'
    b'"model":"tiny","choices":[],"usage":{"prompt_tokens":9,"total_tokens":73,'
    b'"completion_tokens":64}}\n\n'
)
DONE = b"data: [DONE]\n\n"


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


async def _handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, events: int, gap_s: float
) -> None:
    loop = asyncio.get_running_loop()
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length)
            if head.startswith(b"GET /health"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                continue
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            # Every stream ticks on one shared clock, as vLLM emits one token per
            # running request per engine step.
            tick = math.floor(loop.time() / gap_s) + 1
            for _ in range(events):
                await asyncio.sleep(max(0.0, tick * gap_s - loop.time()))
                tick += 1
                if writer.is_closing():  # the client left (uvloop raises on a write)
                    return
                writer.write(_chunked(EVENT))
            if b'"include_usage":true' in body.replace(b" ", b""):
                writer.write(_chunked(USAGE_EVENT))
            writer.write(_chunked(DONE) + b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def _serve(port: int, events: int, gap_s: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, events, gap_s), "127.0.0.1", port
    )
    async with server:
        await server.serve_forever()


def serve(port: int, events: int, gap_s: float) -> None:
    """Serve on 127.0.0.1:`port` until killed: `events` token events a stream, one
    every `gap_s` on a clock all streams share."""
    install_uvloop()
    asyncio.run(_serve(port, events, gap_s))
