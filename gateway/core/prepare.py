"""Turning a client request into a `Forward`: body limits, JSON, salt, layout, usage.

Everything here runs before any upstream I/O, so every failure is a clean
OpenAI-shaped 4xx.  The body is read with a hard size limit and parsed once;
the JSON sent upstream is the client's object with the gateway's changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope

from gateway.core import jsoncodec
from gateway.core.divergence import DivergenceTracker, session_key
from gateway.core.errors import BadRequest, BodyTooLarge
from gateway.core.forward import Forward
from gateway.core.headers import forward_headers, headers_error
from gateway.core.layout import VolatileMatcher, rewrite_chat
from gateway.core.metrics import GatewayMetrics
from gateway.core.models import check_allowed, requested_model
from gateway.core.routing import affinity_key
from gateway.core.tenancy import Authenticator, Principal, SaltMaker

MODELS = "/v1/models"
LAYOUT_HEADER_NAME = "x-sparkserve-layout"
LAYOUT_HEADER = LAYOUT_HEADER_NAME.encode()
SESSION_HEADER = b"x-session-id"
# Routes whose vLLM request models accept `cache_salt` (vllm/entrypoints/*/protocol.py).
SALTED_ROUTES = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}
)
GENERATION_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})
USAGE_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions"})


class Incoming:
    """What preparing needs of an ASGI request: method, headers, body.

    Lighter than starlette's `Request` on the hot path: the headers are looked up
    in a dict built once (the first of repeated headers wins, as with starlette's
    `Headers.get`) rather than by a scan of the header list per lookup."""

    __slots__ = ("_headers", "method", "raw_headers", "receive")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.method: str = scope["method"]
        self.raw_headers: list[tuple[bytes, bytes]] = scope["headers"]
        self._headers = dict(reversed(self.raw_headers))
        self.receive = receive

    def header(self, name: bytes) -> str | None:
        """The value of header `name` (lower case), or None."""
        value = self._headers.get(name)
        return None if value is None else value.decode("latin-1")

    async def next_body(self) -> tuple[bytes, bool]:
        """The next body bytes and whether more follow; `ClientDisconnect` if the
        client left first."""
        message = await self.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        return message.get("body", b""), message.get("more_body", False)


@dataclass(frozen=True)
class Preparer:
    """The per-app pieces a route needs to prepare a request."""

    auth: Authenticator
    salts: SaltMaker
    matcher: VolatileMatcher
    divergence: DivergenceTracker
    metrics: GatewayMetrics
    max_body_bytes: int
    layout_enabled: bool
    # Only a choice between replicas needs the request's affinity key.
    affinity_needed: bool = True
    # Only a request sent over HTTP needs its headers filtered for the upstream (the
    # embedded gateway hands vLLM the client's own, gateway/embedded/middleware.py).
    headers_needed: bool = True

    async def prepare(self, path: str, scope: Scope, receive: Receive) -> Forward:
        """The `Forward` of one request to a proxied route (`GET /v1/models`: no body);
        the header limits first, then the key, then the body."""
        error = headers_error(scope)
        if error is not None:
            raise error
        request = Incoming(scope, receive)
        principal = self.principal(request)
        if path == MODELS:
            return self.plain(request, path, principal)
        return await self.json_call(request, path, principal)

    def principal(self, request: Incoming) -> Principal:
        return self.auth.authenticate(request.header(b"authorization"))

    def plain(self, request: Incoming, path: str, principal: Principal) -> Forward:
        headers = forward_headers(request.raw_headers, {}) if self.headers_needed else []
        return Forward(request.method, path, principal, headers)

    async def json_call(self, request: Incoming, path: str, principal: Principal) -> Forward:
        parsed = parse_json(await read_body(request, self.max_body_bytes))
        body: dict[str, Any] = parsed.value
        model = requested_model(body)
        check_allowed(model, principal.models)
        extra: dict[str, str] = {}
        after = None
        if path == "/v1/chat/completions":
            body, after = self._layout(request, principal, body, extra)
        if path in SALTED_ROUTES:
            body["cache_salt"] = self.salts.salt_for(principal.tenant, body.get("cache_salt"))
        stream = body.get("stream") is True
        drop_usage = stream and path in USAGE_ROUTES and request_usage(body)
        headers = (
            forward_headers(request.raw_headers, {"content-type": "application/json"})
            if self.headers_needed
            else []
        )
        return Forward(
            "POST",
            path,
            principal,
            headers,
            body=jsoncodec.dumps(body, parsed.exact),
            stream=stream,
            drop_usage=drop_usage,
            generation=path in GENERATION_ROUTES,
            extra_headers=extra,
            affinity=affinity_key(path, body) if self.affinity_needed else None,
            model=model,
            after=after,
        )

    def _layout(
        self, request: Incoming, principal: Principal, body: dict[str, Any], extra: dict[str, str]
    ) -> tuple[dict[str, Any], Callable[[], None]]:
        """The messages and tools to send, and the request's prefix divergence to note
        once the gateway is through with it: the forward does not wait for it, and on
        vLLM's loop (the embedded gateway) every µs before the handover delays the
        burst's first tokens."""
        sent = body
        if self.layout_enabled and (request.header(LAYOUT_HEADER) or "").lower() != "off":
            sent, report = rewrite_chat(body, self.matcher)
            extra[LAYOUT_HEADER_NAME] = report.header()
            for kind, count in report.kinds().items():
                self.metrics.layout_rewrites.labels(kind).inc(count)
        else:
            extra[LAYOUT_HEADER_NAME] = "off"
        session_id = request.header(SESSION_HEADER)
        messages, tools = sent.get("messages"), sent.get("tools")  # before salt and usage

        def note_divergence() -> None:
            key = session_key(principal.tenant, session_id, body)
            segment = self.divergence.observe(key, {"messages": messages, "tools": tools})
            if segment is not None:
                self.metrics.prefix_divergence.labels(segment).inc()

        return sent, note_divergence


def request_usage(body: dict[str, Any]) -> bool:
    """Ask vLLM for the final usage chunk; True when the client did not ask for it."""
    options = body.get("stream_options")
    if options is None:
        options = {}
    if not isinstance(options, dict) or options.get("include_usage") is True:
        return False
    # Per-chunk usage is only what the client asked for, never a side effect.
    body["stream_options"] = {**options, "include_usage": True, "continuous_usage_stats": False}
    return True


async def read_body(request: Incoming, limit_bytes: int) -> bytes:
    declared = request.header(b"content-length") or ""
    if declared.isdigit() and int(declared) > limit_bytes:
        await _drain(request, DRAIN_LIMIT_FACTOR * limit_bytes)
        raise _too_large(limit_bytes)
    chunks, size, more = [], 0, True
    while more:
        chunk, more = await request.next_body()
        size += len(chunk)
        if size > limit_bytes:
            raise _too_large(limit_bytes)
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _drain(request: Incoming, most_bytes: int) -> None:
    """Read and drop a refused body (up to a bound) so the client, still sending, reads
    the 413 instead of a connection reset; past the bound the connection just closes."""
    drained, more = 0, True
    while more and drained <= most_bytes:
        chunk, more = await request.next_body()
        drained += len(chunk)


def _too_large(limit_bytes: int) -> BodyTooLarge:
    return BodyTooLarge(f"Request body is larger than the gateway's limit of {limit_bytes} bytes.")


def parse_json(raw: bytes) -> jsoncodec.Parsed:
    """The body as a JSON object; 400 for anything else."""
    try:
        parsed = jsoncodec.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"Request body is not valid JSON ({exc}).") from None
    if not isinstance(parsed.value, dict):
        raise BadRequest("Request body must be a JSON object.")
    # orjson refuses lone surrogates, so only a body `json` parsed can hold one.
    if not parsed.exact and _SURROGATE_ESCAPE.search(raw):
        _check_unicode(parsed.value)
    return parsed


def _check_unicode(body: dict[str, Any]) -> None:
    """JSON may spell lone UTF-16 surrogates (`"\\ud800"`); they are no text and cannot
    be encoded for vLLM. Pairs (emoji) decode to one character and pass."""
    try:
        jsoncodec.dumps(body, exact=False)
    except UnicodeEncodeError:
        raise BadRequest(
            "Request body contains a lone UTF-16 surrogate escape (\\ud800-\\udfff); "
            "strings must be valid Unicode."
        ) from None


# A \uD800-\uDFFF escape in the raw body: only then is the slower check needed.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF][0-9a-fA-F]{2}")
# A refused body (Content-Length over the limit) is read and dropped up to this many
# times the limit, so clients see the 413.
DRAIN_LIMIT_FACTOR = 16
