"""SSE splitting across network chunks and the usage observer."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gateway.sse import EventSplitter, StreamObserver

EVENTS = [b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'] * 3 + [
    b'data: {"choices": [], "usage": {"prompt_tokens": 5}}\n\n',
    b"data: [DONE]\n\n",
]


@given(st.lists(st.integers(min_value=1, max_value=len(b"".join(EVENTS))), max_size=8))
def test_events_survive_any_chunking(cuts: list[int]) -> None:
    stream = b"".join(EVENTS)
    points = sorted(set(cuts))
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    splitter = EventSplitter()
    events = [event for chunk in chunks for event in splitter.feed(chunk)]
    assert events == EVENTS and splitter.rest() == b""


def test_crlf_events_and_incomplete_tail() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: a\r\n\r\ndata: b\n\ndata: c") == [
        b"data: a\r\n\r\n",
        b"data: b\n\n",
    ]
    assert splitter.rest() == b"data: c"


def test_observer_drops_only_the_injected_usage_chunk() -> None:
    gaps: list[float] = []
    observer = StreamObserver(drop_usage=True, on_gap=gaps.append)
    forwarded = [e for e in EVENTS if observer.observe(e)]
    assert forwarded == EVENTS[:3] + EVENTS[4:]
    assert observer.usage == {"prompt_tokens": 5}
    assert len(gaps) == 2 and observer.first_event_at is not None


def test_observer_keeps_usage_when_client_asked_and_continuous_usage() -> None:
    observer = StreamObserver(drop_usage=False, on_gap=lambda gap: None)
    continuous = (
        b"data: "
        + json.dumps(
            {"choices": [{"delta": {}}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
        ).encode()
        + b"\n\n"
    )
    assert observer.observe(continuous) and observer.usage == {
        "prompt_tokens": 5,
        "completion_tokens": 1,
    }
    assert all(observer.observe(e) for e in EVENTS)
