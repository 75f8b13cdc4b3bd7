"""SSE splitting across network chunks and the usage observer."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.sse import EventSplitter, StreamObserver, plain_head

EVENTS = [b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'] * 3 + [
    b'data: {"choices": [], "usage": {"prompt_tokens": 5}}\n\n',
    b"data: [DONE]\n\n",
]


def _no_tick(events: int) -> None:
    raise AssertionError(f"observe() reported {events} zero gaps: only tick() does")


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
    observer = StreamObserver(drop_usage=True, on_gap=gaps.append, on_zero_gaps=_no_tick)
    forwarded = [e for e in EVENTS if observer.observe(e)]
    assert forwarded == EVENTS[:3] + EVENTS[4:]
    assert observer.usage == {"prompt_tokens": 5}
    assert len(gaps) == 2 and observer.first_event_at is not None


def test_observer_keeps_usage_when_client_asked_and_continuous_usage() -> None:
    observer = StreamObserver(drop_usage=False, on_gap=lambda gap: None, on_zero_gaps=_no_tick)
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


A = b'data: {"a":1}\n\n'
B = b'data: {"a":2}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":1}}\n\n'
DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("chunk", "head"),
    [
        (A, len(A)),
        (A + B, len(A + B)),
        (A + DONE, len(A)),  # the end: [DONE] observed as an event
        (A + B + USAGE + DONE, len(A + B)),  # the usage chunk may be dropped: observed
        (USAGE + A, 0),  # nothing before the usage chunk
        (DONE, 0),
        (A + b'data: {"a":2', len(A)),  # an incomplete event waits for its end
        (b'data: {"a":1}\n', 0),
        (b'data: {"a":1}\r\n\r\n', 0),  # other separators: split properly
        (A + b'data: {"a":2}\r\n\r\n', 0),
        (b": keep-alive\n\n", 0),  # not a data event
    ],
)
def test_the_plain_head_is_the_whole_token_events_before_usage_or_done(
    chunk: bytes, head: int
) -> None:
    assert plain_head(chunk) == head


def test_tick_times_events_that_arrived_together() -> None:
    """One real gap per read, and the events read with it as zero gaps, in one call."""
    gaps: list[float] = []
    zeros: list[int] = []
    observer = StreamObserver(False, gaps.append, zeros.append)
    observer.tick(1)
    assert observer.first_event_at is not None and gaps == [] and zeros == []
    observer.tick(5)  # one real gap, then four events that came in the same read
    observer.tick(1)
    assert len(gaps) == 2 and all(gap >= 0 for gap in gaps) and zeros == [4]


def _named(kind: str, payload: dict[str, object]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode()


def test_observer_times_responses_deltas_and_reads_their_final_usage() -> None:
    """The Responses API's stream as vLLM writes it: `event: TYPE` then `data:`.  Only
    the `*.delta` events are token events; the usage is under `response` in
    `response.completed`; every event is forwarded."""
    gaps: list[float] = []
    observer = StreamObserver(drop_usage=False, on_gap=gaps.append, on_zero_gaps=_no_tick)
    usage = {"input_tokens": 5, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 0}}
    stream = [
        _named("response.created", {"type": "response.created", "response": {"usage": None}}),
        _named("response.output_item.added", {"type": "response.output_item.added"}),
        _named("response.output_text.delta", {"type": "response.output_text.delta"}),
        _named("response.reasoning_text.delta", {"type": "response.reasoning_text.delta"}),
        _named("response.output_text.delta", {"type": "response.output_text.delta"}),
        _named("response.output_text.done", {"type": "response.output_text.done"}),
        _named("response.completed", {"type": "response.completed", "response": {"usage": usage}}),
    ]
    assert all(observer.observe(event) for event in stream)
    assert observer.first_event_at is not None and len(gaps) == 2
    assert observer.usage == usage
    # A stream cut short: no final event, no usage; nothing timed before a delta.
    cut = StreamObserver(drop_usage=False, on_gap=gaps.append, on_zero_gaps=_no_tick)
    assert cut.observe(stream[0]) and cut.first_event_at is None and cut.usage is None
