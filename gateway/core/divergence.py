"""Which prompt segment broke a chat session's prefix, request after request.

A chat session is a tenant plus the `x-session-id` header, or else a hash of the
first user message.  For each chat session the tracker remembers hashes of the
system messages, the tools and each history message of the last request (a
bounded LRU), and names the first segment of a new request that differs:
`system`, then `tools`, then `history` (the previous request's messages, less
its last one, must be a prefix of the new history).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.jsoncodec import canonical

SEGMENTS = ("system", "tools", "history")


def _hash(value: Any) -> bytes:
    return hashlib.blake2b(canonical(value), digest_size=16).digest()


@dataclass(frozen=True)
class Segments:
    system: bytes
    tools: bytes
    history: tuple[bytes, ...]


def split_segments(body: Mapping[str, Any]) -> Segments:
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    lead = 0
    while lead < len(messages) and _role(messages[lead]) in ("system", "developer"):
        lead += 1
    return Segments(
        system=_hash(messages[:lead]),
        tools=_hash(body.get("tools")),
        history=tuple(_hash(message) for message in messages[lead:]),
    )


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def session_key(tenant: str, session_id: str | None, body: Mapping[str, Any]) -> str:
    if session_id:
        return f"{tenant}\0id\0{session_id}"
    messages = body.get("messages")
    first = (
        next(
            (m.get("content") for m in messages or [] if _role(m) == "user"),
            None,
        )
        if isinstance(messages, list)
        else None
    )
    return f"{tenant}\0first\0{_hash(first).hex()}"


def diverged(previous: Segments, current: Segments) -> str | None:
    """The first segment of `current` that breaks `previous`'s prefix, or None."""
    if previous.system != current.system:
        return "system"
    if previous.tools != current.tools:
        return "tools"
    kept = previous.history[:-1]
    if current.history[: len(kept)] != kept:
        return "history"
    return None


class DivergenceTracker:
    """A bounded memory of each chat session's last segments (least recently used first out)."""

    def __init__(self, max_sessions: int) -> None:
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, Segments] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def observe(self, key: str, body: Mapping[str, Any]) -> str | None:
        return self.observe_segments(key, split_segments(body))

    def observe_segments(self, key: str, current: Segments) -> str | None:
        previous = self._sessions.pop(key, None)
        self._sessions[key] = current
        if len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return None if previous is None else diverged(previous, current)
