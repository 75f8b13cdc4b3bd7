"""Prefix-stable layout: canonical tools, volatile values moved to the end, idempotent."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.layout import TRAILER_HEADING, VolatileMatcher, canonical_json, rewrite_chat

MATCHER = VolatileMatcher({"ticket": r"TICKET-\d+"})
SYSTEM = (
    "You are a coding agent. Now: 2026-11-29T09:30:56Z. "
    "Request 550e8400-e29b-41d4-a716-446655440000, "
    "trace deadbeefcafe0123456789ab, day 2026-11-29, clock 09:31, ticket TICKET-42."
)


def _tool(name: str, reverse: bool = False) -> dict[str, Any]:
    params = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "number"}}}
    function = {"name": name, "description": f"{name} tool", "parameters": params}
    if reverse:
        function = dict(reversed(list(function.items())))
    return {"type": "function", "function": function}


def _chat(system: str = SYSTEM, *turns: dict[str, Any]) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "fix the bug"}]
    return {
        "model": "tiny",
        "messages": [*messages, *turns],
        "tools": [_tool("zeta"), _tool("alpha", True)],
    }


def test_tools_sorted_and_canonical() -> None:
    body, report = rewrite_chat(_chat(), MATCHER)
    assert [t["function"]["name"] for t in body["tools"]] == ["alpha", "zeta"]
    assert all(json.dumps(t) == json.dumps(canonical_json(t)) for t in body["tools"])
    assert report.tools_sorted and report.schemas_canonical


def test_volatile_values_move_to_the_last_user_message() -> None:
    body, report = rewrite_chat(_chat(), MATCHER)
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    for value in ("2026-11-29T09:30:56Z", "550e8400", "deadbeefcafe", "09:31", "TICKET-42"):
        assert value not in system and value in user
    assert "[timestamp_1]" in system and "[uuid_1]" in system and "[ticket_1]" in system
    assert user.startswith("fix the bug\n\n" + TRAILER_HEADING)
    assert dict(report.moved) == {
        "timestamp": 1,
        "uuid": 1,
        "hex_id": 1,
        "date": 1,
        "time": 1,
        "ticket": 1,
    }
    assert report.header() == (
        "moved=date:1,hex_id:1,ticket:1,time:1,timestamp:1,uuid:1;tools=sorted+canonical"
    )


def test_stable_system_prompt_across_requests() -> None:
    later = SYSTEM.replace("09:30:56", "10:02:11").replace("550e8400", "660e8400")
    first, _ = rewrite_chat(_chat(), MATCHER)
    second, _ = rewrite_chat(_chat(later), MATCHER)
    assert first["messages"][0] == second["messages"][0]
    assert first["tools"] == second["tools"]


def test_agent_loop_targets_the_last_tool_result_and_keeps_turns() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "alpha", "arguments": "{}"}}
        ],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    request = _chat(SYSTEM, call, result)
    body, _ = rewrite_chat(request, MATCHER)
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assert body["messages"][1] == request["messages"][1]
    assert body["messages"][2] == call
    assert body["messages"][3]["content"].startswith("ok\n\n" + TRAILER_HEADING)


def test_trailing_assistant_prefill_is_left_alone() -> None:
    request = _chat(SYSTEM, {"role": "assistant", "content": "Sure, "})
    body, _ = rewrite_chat(request, MATCHER)
    assert body["messages"][2] == {"role": "assistant", "content": "Sure, "}
    assert TRAILER_HEADING in body["messages"][1]["content"]


def test_list_content_parts() -> None:
    request = {
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "at 2026-11-29T09:30:56Z"}]},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ]
    }
    body, _ = rewrite_chat(request, MATCHER)
    assert body["messages"][0]["content"] == [{"type": "text", "text": "at [timestamp_1]"}]
    assert body["messages"][1]["content"][-1]["text"].endswith(
        "[timestamp_1]: 2026-11-29T09:30:56Z"
    )


def test_no_user_message_no_move_and_input_untouched() -> None:
    request = {"messages": [{"role": "system", "content": SYSTEM}]}
    snapshot = json.dumps(request)
    body, report = rewrite_chat(request, MATCHER)
    assert body["messages"] == request["messages"] and report.header() == "unchanged"
    rewrite_chat(_chat(), MATCHER)
    assert json.dumps(request) == snapshot


def test_repeated_value_shares_one_placeholder() -> None:
    body, report = rewrite_chat(_chat("a 09:30 b 09:30 c 10:00"), MATCHER)
    assert body["messages"][0]["content"] == "a [time_1] b [time_1] c [time_2]"
    assert report.moved["time"] == 2


texts = st.text(alphabet=st.sampled_from(list("ab :-T0123456789Zdeadbf\n")), max_size=80)
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
messages = st.lists(st.fixed_dictionaries({"role": roles, "content": texts}), max_size=6)


@given(messages)
def test_idempotent_and_turns_preserved(msgs: list[dict[str, Any]]) -> None:
    once, _ = rewrite_chat({"messages": msgs}, MATCHER)
    twice, report = rewrite_chat(once, MATCHER)
    assert twice == once and not report.moved
    assert [m["role"] for m in once["messages"]] == [m["role"] for m in msgs]
    for before, after in zip(msgs, once["messages"], strict=True):
        if before["role"] not in ("system", "developer"):
            assert after["content"].startswith(before["content"])


def test_roles_that_are_not_strings_are_left_alone() -> None:
    """Found by the schemathesis fuzz: a list as role was a 500 (unhashable)."""
    body = {"messages": [{"role": ["system"], "content": "at 2025-01-01T10:00:00Z"}]}
    sent, report = rewrite_chat(body, VolatileMatcher({}))
    assert sent["messages"] == body["messages"] and report.header() == "unchanged"


# Without configured rules the matcher tries its alternation only where a built-in
# pattern can begin; with any rule it runs `re.sub` over the whole text.  A rule that
# never matches therefore gives the plain `re.sub` result to compare with.
BUILTIN_ONLY = VolatileMatcher({})
REFERENCE = VolatileMatcher({"never": r"(?!)"})


def _substituted(matcher: VolatileMatcher, text: str) -> tuple[str, dict[str, str]]:
    values: dict[str, str] = {}
    return matcher.substitute(text, values, {}), values


def test_builtin_only_matcher_finds_every_kind() -> None:
    text, values = _substituted(BUILTIN_ONLY, SYSTEM.replace(" ticket TICKET-42", ""))
    assert values == {
        "[timestamp_1]": "2026-11-29T09:30:56Z",
        "[uuid_1]": "550e8400-e29b-41d4-a716-446655440000",
        "[hex_id_1]": "deadbeefcafe0123456789ab",
        "[date_1]": "2026-11-29",
        "[time_1]": "09:31",
    }
    assert "2026" not in text and "[uuid_1]" in text


@given(st.text(alphabet="0123456789abcdefABCDEFxyz -:T/.,Z+pm", max_size=120))
def test_builtin_only_matcher_equals_re_sub(text: str) -> None:
    assert _substituted(BUILTIN_ONLY, text) == _substituted(REFERENCE, text)


@given(
    st.lists(
        st.sampled_from(
            [
                "2026-11-29",
                "T",
                "09:31",
                ":07",
                "Z",
                " ",
                "x",
                "deadbeef",
                "0123",
                "-",
                "12/31/2025",
                "550e8400-e29b-41d4-a716-446655440000",
                "7 pm",
                "+01:00",
                "cafe",
            ]
        ),
        max_size=12,
    )
)
def test_builtin_only_matcher_equals_re_sub_on_realistic_pieces(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert _substituted(BUILTIN_ONLY, text) == _substituted(REFERENCE, text)
