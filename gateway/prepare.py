"""Turning a client request into a `Forward`: body limits, JSON, salt, layout, usage.

Everything here runs before any upstream I/O, so every failure is a clean
OpenAI-shaped 4xx.  The body is read with a hard size limit and parsed once;
the JSON sent upstream is the client's object with the gateway's changes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from gateway.divergence import DivergenceTracker, session_key
from gateway.errors import BadRequest, BodyTooLarge
from gateway.layout import VolatileMatcher, rewrite_chat
from gateway.metrics import GatewayMetrics
from gateway.proxy import Forward
from gateway.routing import affinity_key
from gateway.tenancy import Authenticator, Principal, SaltMaker
from gateway.upstream import forward_headers

LAYOUT_HEADER = "x-sparkserve-layout"
SESSION_HEADER = "x-session-id"
# Routes whose vLLM request models accept `cache_salt` (vllm/entrypoints/*/protocol.py).
SALTED_ROUTES = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}
)
GENERATION_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})
USAGE_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions"})


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

    def principal(self, request: Request) -> Principal:
        return self.auth.authenticate(request.headers.get("authorization"))

    def plain(self, request: Request, path: str, principal: Principal) -> Forward:
        headers = forward_headers(request.headers.raw, {})
        return Forward(request.method, path, principal, headers)

    async def json_call(self, request: Request, path: str, principal: Principal) -> Forward:
        body = parse_json_object(await read_body(request, self.max_body_bytes))
        extra: dict[str, str] = {}
        if path == "/v1/chat/completions":
            body = self._layout(request, principal, body, extra)
        if path in SALTED_ROUTES:
            body["cache_salt"] = self.salts.salt_for(principal.tenant, body.get("cache_salt"))
        stream = body.get("stream") is True
        drop_usage = stream and path in USAGE_ROUTES and request_usage(body)
        headers = forward_headers(request.headers.raw, {"content-type": "application/json"})
        return Forward(
            "POST",
            path,
            principal,
            headers,
            body=_dump(body),
            stream=stream,
            drop_usage=drop_usage,
            generation=path in GENERATION_ROUTES,
            extra_headers=extra,
            affinity=affinity_key(path, body),
        )

    def _layout(
        self, request: Request, principal: Principal, body: dict[str, Any], extra: dict[str, str]
    ) -> dict[str, Any]:
        sent = body
        if self.layout_enabled and request.headers.get(LAYOUT_HEADER, "").lower() != "off":
            sent, report = rewrite_chat(body, self.matcher)
            extra[LAYOUT_HEADER] = report.header()
            for kind, count in report.kinds().items():
                self.metrics.layout_rewrites.labels(kind).inc(count)
        else:
            extra[LAYOUT_HEADER] = "off"
        key = session_key(principal.tenant, request.headers.get(SESSION_HEADER), body)
        segment = self.divergence.observe(key, sent)
        if segment is not None:
            self.metrics.prefix_divergence.labels(segment).inc()
        return sent


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


async def read_body(request: Request, limit_bytes: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit_bytes:
        await _drain(request, DRAIN_LIMIT_FACTOR * limit_bytes)
        raise _too_large(limit_bytes)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit_bytes:
            raise _too_large(limit_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(request: Request, most_bytes: int) -> None:
    """Read and drop a refused body (up to a bound) so the client, still sending, reads
    the 413 instead of a connection reset; past the bound the connection just closes."""
    drained = 0
    async for chunk in request.stream():
        drained += len(chunk)
        if drained > most_bytes:
            return


def _too_large(limit_bytes: int) -> BodyTooLarge:
    return BodyTooLarge(f"Request body is larger than the gateway's limit of {limit_bytes} bytes.")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"Request body is not valid JSON ({exc}).") from None
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object.")
    if _SURROGATE_ESCAPE.search(raw):
        _check_unicode(body)
    return body


def _check_unicode(body: dict[str, Any]) -> None:
    """JSON may spell lone UTF-16 surrogates (`"\\ud800"`); they are no text and cannot
    be encoded for vLLM. Pairs (emoji) decode to one character and pass."""
    try:
        json.dumps(body, ensure_ascii=False).encode()
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


def _dump(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
