"""A misbehaving stand-in for vLLM, so the gateway's timeouts and buffers can be seen.

The request's `model` picks the behaviour:
  stall-headers  read the request, never answer (the gateway's read timeout must fire)
  stall-stream   200 + one SSE event, then silence
  firehose       SSE events as fast as the socket takes them, forever
`GET /stats` answers `{"firehose_bytes": N}` (bytes the socket accepted);
`GET /health` answers 200.

    python -m reliability.fake_upstream --port N
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

SSE_HEADERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
FIREHOSE_EVENT_BYTES = 16 * 1024
FIREHOSE_EVENTS_PER_CHUNK = 4
MAX_HEADER_BYTES = 65536


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-encoding chunk."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def sse_event(text: str) -> bytes:
    payload = {"object": "text_completion", "choices": [{"index": 0, "text": text}]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def plain(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
    head += f"content-length: {len(body)}\r\n\r\n"
    return head.encode() + body


@dataclass
class Stats:
    firehose_bytes: int = 0


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > MAX_HEADER_BYTES:
        raise ValueError("headers too large")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return method, path, body


async def firehose(writer: asyncio.StreamWriter, stats: Stats) -> None:
    data = chunk(sse_event("x" * FIREHOSE_EVENT_BYTES) * FIREHOSE_EVENTS_PER_CHUNK)
    writer.write(SSE_HEADERS)
    while True:
        writer.write(data)
        await writer.drain()
        stats.firehose_bytes += len(data)


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stats: Stats) -> None:
    try:
        method, path, body = await read_request(reader)
        if method == "GET":
            answer = {"firehose_bytes": stats.firehose_bytes} if path == "/stats" else {}
            writer.write(plain("200 OK", json.dumps(answer).encode()))
            await writer.drain()
            return
        model = json.loads(body or b"{}").get("model")
        if model == "firehose":
            await firehose(writer, stats)
        if model == "stall-stream":
            writer.write(SSE_HEADERS + chunk(sse_event("first")))
            await writer.drain()
        await reader.read()  # silence until the gateway gives up and closes
    except (OSError, ValueError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve(port: int) -> None:
    stats = Stats()
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, stats), "127.0.0.1", port, limit=MAX_HEADER_BYTES * 2
    )
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.port))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
