"""Server-sent events: split a byte stream into complete events, observe them.

`EventSplitter.feed` takes network chunks and returns the events completed so
far (an event may span chunks; one chunk may hold several events).
`StreamObserver` notes the timing of each event and the usage chunk, and says
whether an event is the usage chunk the gateway itself asked for (dropped).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.core.jsoncodec import loads_or_none

_SEPARATORS = (b"\n\n", b"\r\n\r\n", b"\r\r")
# The event that ends an OpenAI stream (as vLLM writes it).
DONE_EVENT = b"data: [DONE]"


class EventSplitter:
    """Buffers only an incomplete trailing event, never a whole stream."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk if self._pending else chunk
        separators = _SEPARATORS if b"\r" in data else _SEPARATORS[:1]
        events = []
        start = 0
        while True:
            end = _next_boundary(data, start, separators)
            if end < 0:
                break
            events.append(data[start:end])
            start = end
        self._pending = data[start:]
        return events

    @property
    def idle(self) -> bool:
        """No incomplete event is waiting for its end."""
        return not self._pending

    def rest(self) -> bytes:
        """Whatever arrived after the last complete event (forwarded as is at the end)."""
        pending, self._pending = self._pending, b""
        return pending


def _next_boundary(data: bytes, start: int, separators: tuple[bytes, ...]) -> int:
    """The index just past the first event separator at or after `start`, or -1."""
    best = -1
    for separator in separators:
        found = data.find(separator, start)
        if found >= 0 and (best < 0 or found + len(separator) < best):
            best = found + len(separator)
    return best


def plain_head(chunk: bytes) -> int:
    """How many leading bytes of `chunk` are whole `data:` events with `\n\n`
    separators, none of them `[DONE]` or carrying usage: token chunks, which the relay
    forwards as they are, counting their separators instead of splitting them (the hot
    path: a few scans of the chunk however many events it holds).  The usage chunk,
    `[DONE]` and anything after them are left for `EventSplitter` and `StreamObserver`."""
    if not chunk.startswith(b"data:") or b"\r" in chunk:
        return 0
    cut = len(chunk)
    for marker in (b'"usage"', DONE_EVENT):
        found = chunk.find(marker, 0, cut)
        if found >= 0:
            cut = found
    end = chunk.rfind(b"\n\n", 0, cut)
    return end + 2 if end >= 0 else 0


# The Responses API's last event of a stream, which holds the response with its usage.
FINAL_RESPONSE_EVENTS = frozenset(
    {b"response.completed", b"response.incomplete", b"response.failed"}
)


def _payload(event: bytes) -> Any:
    """The JSON of a single-line `data:` event, or None."""
    for line in event.splitlines():
        if line.startswith(b"data:"):
            return loads_or_none(line[5:])
    return None


@dataclass
class StreamObserver:
    """Timing and usage seen on a stream; `drop_usage` drops the injected usage chunk."""

    drop_usage: bool
    on_gap: Callable[[float], None]
    on_zero_gaps: Callable[[int], None]
    first_event_at: float | None = None
    last_event_at: float | None = None
    usage: dict[str, Any] | None = None

    def observe(self, event: bytes) -> bool:
        """Record `event`; return True when it must be forwarded to the client."""
        if not event.startswith(b"data:") or event.startswith(DONE_EVENT):
            if event.startswith(b"event:"):
                self._named(event)
            return True
        if b'"usage"' in event and self._note_usage(event):
            return not self.drop_usage
        self._timed()
        return True

    def _timed(self) -> None:
        """A token event arrived now."""
        now = time.monotonic()
        if self.first_event_at is None:
            self.first_event_at = now
        elif self.last_event_at is not None:
            self.on_gap(now - self.last_event_at)
        self.last_event_at = now

    def _named(self, event: bytes) -> None:
        """A Responses API event (`event: TYPE`, then its `data:` line): each `*.delta`
        (text, reasoning, a tool call's arguments) is a token event, timed as a chat
        chunk is; the final `response.completed` (or `.incomplete`, `.failed`) carries
        the usage under `response` (input/output tokens, which `record_finish` reads)."""
        kind = event.split(b"\n", 1)[0][6:].strip()
        if kind.endswith(b".delta"):
            self._timed()
        elif kind in FINAL_RESPONSE_EVENTS and b'"usage"' in event:
            payload = _payload(event)
            response = payload.get("response") if isinstance(payload, dict) else None
            usage = response.get("usage") if isinstance(response, dict) else None
            if isinstance(usage, dict):
                self.usage = usage

    def tick(self, events: int) -> None:
        """`events` data events (no usage, no [DONE]) arrived together now: one gap
        since the last event, then `events - 1` gaps of 0 (`on_zero_gaps`)."""
        now = time.monotonic()
        if self.first_event_at is None:
            self.first_event_at = now
        elif self.last_event_at is not None:
            self.on_gap(now - self.last_event_at)
        if events > 1:
            self.on_zero_gaps(events - 1)
        self.last_event_at = now

    def _note_usage(self, event: bytes) -> bool:
        """Keep the latest usage; True when this is the final usage-only chunk."""
        payload = _payload(event)
        if not isinstance(payload, dict) or not isinstance(payload.get("usage"), dict):
            return False
        self.usage = payload["usage"]
        return payload.get("choices") == []
