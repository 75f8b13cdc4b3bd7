"""Test servers: an ASGI app under a real uvicorn server in a thread (as httpx's own
tests do), and a raw asyncio TCP server for hand-written HTTP responses."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

STARTUP_TIMEOUT_S = 10.0
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """An asyncio TCP server running `handler` per connection; `close` closes every
    connection it accepted, so no socket outlives the test."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.writers: list[asyncio.StreamWriter] = []

    async def _tracked(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        await self.handler(reader, writer)

    async def start(self) -> str:
        """Start listening on 127.0.0.1; the base URL."""
        self.server = await asyncio.start_server(self._tracked, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        self.server.close()
        await self.server.wait_closed()
        await asyncio.sleep(0.01)


@contextmanager
def serve(app: Any, port: int = 0) -> Iterator[str]:
    """Yield the base URL of `app` served on 127.0.0.1, as `python -m gateway` serves
    it (uvicorn's httptools protocol); stop the server afterwards."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", ws="none", http="httptools", loop="asyncio"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(STARTUP_TIMEOUT_S)
        sock.close()
