"""The least a relay on the gateway's libraries costs: `python -m bench.gateway_floor`.

A measuring device for `python -m bench.gateway_cpu --floor`, never a gateway: it serves
`GATEWAY_PORT` on `GATEWAY_HOST` with uvicorn (httptools, uvloop, as `python -m gateway`
runs), answers `/readyz`, and relays any other request's body to
`GATEWAY_UPSTREAM_URL` with one aiohttp session, passing each chunk read back to the
client as it comes. No auth, parsing, layout, admission, metrics or disconnect watch: what
its process spends per request is what these libraries and the event loop cost to move a
stream from one socket to another.
"""

from __future__ import annotations

import os

import aiohttp
import uvicorn
from starlette.types import Message, Receive, Scope, Send


class Floor:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.client: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        if scope["path"] == "/readyz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        assert self.client is not None
        url, headers = self.upstream + scope["path"], {"content-type": "application/json"}
        async with self.client.post(url, data=body, headers=headers) as r:
            kind = r.headers.get("content-type", "").encode()
            start: Message = {
                "type": "http.response.start",
                "status": r.status,
                "headers": [(b"content-type", kind)],
            }
            await send(start)
            while chunk := await r.content.readany():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                connector = aiohttp.TCPConnector(limit=0)
                self.client = aiohttp.ClientSession(connector=connector, auto_decompress=False)
                await send({"type": "lifespan.startup.complete"})
            else:
                if self.client is not None:
                    await self.client.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def main() -> None:
    uvicorn.run(
        Floor(os.environ["GATEWAY_UPSTREAM_URL"]),
        host=os.environ.get("GATEWAY_HOST", "127.0.0.1"),
        port=int(os.environ["GATEWAY_PORT"]),
        loop="uvloop",
        http="httptools",
        log_level="warning",
    )


if __name__ == "__main__":
    main()
