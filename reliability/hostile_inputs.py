"""The hostile requests sent to the gateway, as data: what goes on the wire and what is
acceptable back.  `MUST_4XX`: a 4xx with an OpenAI-shaped body.  `NO_5XX`: vLLM may accept
them (200) or refuse them (4xx, OpenAI-shaped), never a 5xx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HUGE_BODY_BYTES = 2 * 1024 * 1024
HUGE_HEADER_BYTES = 1024 * 1024
MANY_HEADERS = 5000
NESTING_DEPTH = 50_000


@dataclass(frozen=True)
class Hostile:
    name: str
    content: bytes | None = None
    path: str = CHAT
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False  # send the body without a content-length


def _chat(text: str, **fields: Any) -> bytes:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 1}
    return json.dumps({**body, **fields}).encode()


def must_4xx(canary: str) -> list[Hostile]:
    say = f"{canary} hostile"
    return [
        Hostile("malformed-json", b'{"model": "tiny", "messages": ['),
        Hostile("json-array", b"[1, 2, 3]"),
        Hostile("empty-body", b""),
        Hostile("deep-nesting", b"[" * NESTING_DEPTH + b"]" * NESTING_DEPTH),
        Hostile("invalid-utf8", _chat(say).replace(b"hostile", b"\xff\xfe\xfd")),
        Hostile("lone-surrogate", _chat(say).replace(b"hostile", b"\\ud800")),
        Hostile("huge-body", _chat(say + "x" * HUGE_BODY_BYTES)),
        Hostile("huge-body-chunked", _chat(say + "x" * HUGE_BODY_BYTES), chunked=True),
        Hostile("huge-header", _chat(say), headers={"x-junk": "a" * HUGE_HEADER_BYTES}),
        Hostile("many-headers", _chat(say), headers={f"x-h{i}": "v" for i in range(MANY_HEADERS)}),
        Hostile("max_tokens=-1", _chat(say, max_tokens=-1)),
        Hostile("max_tokens=0", _chat(say, max_tokens=0)),
        Hostile("max_tokens=10^12", _chat(say, max_tokens=10**12)),
        Hostile("max_tokens=1e400", _chat(say).replace(b'"max_tokens": 1', b'"max_tokens": 1e400')),
        Hostile("max_tokens=str", _chat(say, max_tokens="ten")),
        Hostile("n=0", _chat(say, n=0)),
        Hostile("n=-1", _chat(say, n=-1)),
        Hostile("n=10^9", _chat(say, n=10**9)),
        Hostile("top_logprobs=10^6", _chat(say, logprobs=True, top_logprobs=10**6)),
        Hostile("top_logprobs=-1", _chat(say, logprobs=True, top_logprobs=-1)),
        Hostile(
            "completion-logprobs=10^6",
            json.dumps({"model": "tiny", "prompt": say, "logprobs": 10**6}).encode(),
            path=COMPLETIONS,
        ),
        Hostile("temperature=NaN", _chat(say).replace(b'"max_tokens": 1', b'"temperature": NaN')),
        Hostile("temperature=-1", _chat(say, temperature=-1)),
        Hostile("messages=string", json.dumps({"model": "tiny", "messages": say}).encode()),
        Hostile("unknown-model", _chat(say, model="no-such-model")),
        Hostile("cache_salt=int", _chat(say, cache_salt=5)),
        Hostile("cache_salt=empty", _chat(say, cache_salt="")),
        Hostile("unknown-route", _chat(say), path="/v1/no-such-route"),
        Hostile("wrong-method", None, method="GET"),
        Hostile("null-in-path", _chat(say), path="/v1/chat/completions%00"),
    ]


def no_5xx(canary: str) -> list[Hostile]:
    say = f"{canary} odd"
    return [
        Hostile("unknown-fields", _chat(say, frobnicate=True, x_extra={"a": [1, 2]})),
        Hostile(
            "empty-messages",
            json.dumps({"model": "tiny", "messages": [], "max_tokens": 1}).encode(),
        ),
        Hostile("nul-in-content", _chat(say + "\u0000")),
        # vLLM's lax bool parsing takes "yes" for true (the gateway then relays it unstreamed).
        Hostile("stream=yes", _chat(say, stream="yes")),
        Hostile("text-plain-content-type", _chat(say), headers={"content-type": "text/plain"}),
    ]


async def chunks(data: bytes, size: int = 65536) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]
