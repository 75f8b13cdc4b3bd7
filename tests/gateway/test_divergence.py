"""Segment divergence between consecutive requests of a session."""

from __future__ import annotations

from typing import Any

from gateway.core.divergence import DivergenceTracker, session_key


def _body(system: str, tools: list[str], *history: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}]
    messages += [
        {"role": "user" if i % 2 == 0 else "assistant", "content": h} for i, h in enumerate(history)
    ]
    return {"messages": messages, "tools": tools}


def test_first_segment_that_differs_is_named() -> None:
    tracker = DivergenceTracker(10)
    assert tracker.observe("s", _body("sys", ["a"], "q1")) is None
    assert tracker.observe("s", _body("sys", ["a"], "q1", "a1", "q2")) is None
    assert tracker.observe("s", _body("sys2", ["b"], "q1", "a1", "q2")) == "system"
    assert tracker.observe("s", _body("sys2", ["c"], "q1")) == "tools"
    assert tracker.observe("s", _body("sys2", ["c"], "q1", "x", "q2")) is None
    assert tracker.observe("s", _body("sys2", ["c"], "q1", "y", "q3")) == "history"


def test_last_message_of_previous_request_may_change() -> None:
    tracker = DivergenceTracker(10)
    tracker.observe("s", _body("sys", [], "q1 with trailer"))
    assert tracker.observe("s", _body("sys", [], "q1", "a1", "q2")) is None


def test_memory_is_bounded() -> None:
    tracker = DivergenceTracker(2)
    for key in "abc":
        tracker.observe(key, _body("sys", [], "q"))
    assert len(tracker) == 2
    assert tracker.observe("a", _body("other", [], "q")) is None  # forgotten, so no comparison


def test_session_key_uses_header_or_first_user_message() -> None:
    one = _body("sys", [], "q1")
    two = _body("sys2", [], "q1", "a1", "q2")
    assert session_key("t", None, one) == session_key("t", None, two)
    assert session_key("t", None, one) != session_key("u", None, one)
    assert session_key("t", "abc", one) != session_key("t", None, one)
