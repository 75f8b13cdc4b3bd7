"""Header rules: what is passed to vLLM and back, and the request header limits.

Hop-by-hop headers (RFC 9110 §7.6.1) and the gateway's own are never forwarded;
the client's credentials never reach vLLM.  A request with too many or too large
headers is refused with 431 before anything else is read.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import Scope

from gateway.core.errors import HeadersTooLarge

# RFC 9110 §7.6.1 hop-by-hop headers, plus those the gateway sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# Never passed to vLLM: the client's credentials, the gateway's own controls, and
# `Expect: 100-continue`, which the gateway's server answered and whose body it has read
# (forwarded, vLLM would answer `100 Continue` to a request sent whole).
REQUEST_DROPPED = HOP_BY_HOP | {
    "authorization",
    "cookie",
    "accept-encoding",
    "x-session-id",
    "expect",
}
# Set again by uvicorn, or no longer true once the gateway rewrote the stream.
RESPONSE_DROPPED = HOP_BY_HOP | {"date", "server"}
_REQUEST_DROPPED_BYTES = frozenset(name.encode() for name in REQUEST_DROPPED)
_RESPONSE_DROPPED_BYTES = frozenset(name.encode() for name in RESPONSE_DROPPED)

# Request header limits (nginx's large_client_header_buffers default is 4 × 8 KiB):
# uvicorn with httptools enforces none, and every `x-*` header would reach vLLM.
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADER_COUNT = 100


def forward_headers(
    raw: Iterable[tuple[bytes, bytes]], extra: dict[str, str]
) -> list[tuple[str, str]]:
    """The client's headers vLLM may see, then `extra`, which replaces any of the client's
    of the same name: a field such as Content-Type is sent once (RFC 9110 §5.3; a strict
    server refuses a request that repeats it)."""
    replaced = {name.lower().encode("latin-1") for name in extra}
    kept = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in raw
        if name.lower() not in _REQUEST_DROPPED_BYTES
        and name.lower() not in replaced
        and not name.lower().startswith(b"x-sparkserve-")
    ]
    return kept + list(extra.items())


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in raw if name.lower() not in _RESPONSE_DROPPED_BYTES]


def headers_error(scope: Scope) -> HeadersTooLarge | None:
    """The 431 for a request with too many or too large headers, else None."""
    headers = scope["headers"]
    size = sum(len(name) + len(value) for name, value in headers)
    if len(headers) <= MAX_HEADER_COUNT and size <= MAX_HEADER_BYTES:
        return None
    return HeadersTooLarge(
        f"Request headers too large ({len(headers)} headers, {size} bytes); the gateway "
        f"accepts at most {MAX_HEADER_COUNT} headers and {MAX_HEADER_BYTES} bytes."
    )
