"""A synthetic vLLM: the OpenAI routes the gateway forwards, with controllable streams.

It records what it received (`requests`), can hold a stream open until the test
releases it (`release`), splits events across network writes, and notes when a
client went away mid-stream (`disconnected`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

USAGE = {
    "prompt_tokens": 300,
    "completion_tokens": 3,
    "total_tokens": 303,
    "prompt_tokens_details": {"cached_tokens": 256},
}


@dataclass
class FakeVLLM:
    events: int = 3
    hold: bool = False
    hold_first: bool = False  # hold before the first event (after the response head)
    served: tuple[str, ...] = ("tiny",)  # the ids /v1/models lists
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    disconnected: threading.Event = field(default_factory=threading.Event)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/health", self.health),
                Route("/v1/models", self.models),
                Route("/v1/chat/completions", self.generate, methods=["POST"]),
                Route("/v1/completions", self.generate, methods=["POST"]),
                Route("/v1/embeddings", self.echo, methods=["POST"]),
                Route("/v1/responses", self.echo, methods=["POST"]),
                Route("/tokenize", self.echo, methods=["POST"]),
            ]
        )

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def models(self, request: Request) -> Response:
        data = [{"id": name, "object": "model", "max_model_len": 2048} for name in self.served]
        return JSONResponse({"object": "list", "data": data})

    async def echo(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        return JSONResponse({"echo": body}, headers={"x-upstream": "yes"})

    async def generate(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if body.get("model") == "missing":
            error = {"message": "The model `missing` does not exist.", "type": "NotFoundError"}
            return JSONResponse({"error": error}, status_code=404)
        if body.get("stream") is not True:
            return JSONResponse(_completion(), headers={"x-upstream": "yes"})
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        return StreamingResponse(
            self._stream(request, usage),
            media_type="text/event-stream",
            headers={"x-upstream": "yes"},
        )

    async def _stream(self, request: Request, usage: bool) -> Any:
        try:
            if self.hold_first:
                await self._wait_release(request, self.hold_first)
            for i in range(self.events):
                event = _event({"choices": [{"index": 0, "delta": {"content": f"t{i}"}}]})
                yield event[:7]  # an event spans two network writes
                await asyncio.sleep(0.001)
                yield event[7:]
                if i == 0:
                    await self._wait_release(request, self.hold)
            if usage:
                yield _event({"choices": [], "usage": USAGE})
            yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.disconnected.set()
            raise

    async def _wait_release(self, request: Request, hold: bool) -> None:
        while hold and not self.release.is_set():
            await asyncio.sleep(0.01)


def _event(payload: dict[str, Any]) -> bytes:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "tiny", **payload}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _completion() -> dict[str, Any]:
    message = {"role": "assistant", "content": "hello"}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "tiny",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": USAGE,
    }
