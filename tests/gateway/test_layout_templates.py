"""The prefix-stable layout rendered through chat templates: the tiny test model's
(devtools/tiny_model.py) and a Qwen3-style one written here for the test (tools in the
system turn, tool results wrapped in `<tool_response>` inside one user turn, the last
real user query looked up from the end, an error when there is none, the system turn
only first).  For an agent loop whose system prompt carries a timestamp and a request
id and whose tools come shuffled: every rewritten request renders, the whole system and
tools block is the same text from one request to the next (without the rewrite, the
timestamp ends the shared prefix inside it), and every moved value is still in the
prompt after the conversation's turns, in their order."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from devtools.tiny_model import CHAT_TEMPLATE as TINY_TEMPLATE
from gateway.core.layout import VolatileMatcher, rewrite_chat

QWEN3_STYLE = """
{%- if tools %}
  {{- '<|im_start|>system\\n' }}
  {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
  {{- '# Tools\\n\\nYou may call one or more functions.\\n<tools>' }}
  {%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
  {{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
  {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query=-1) %}
{%- for message in messages %}
  {%- if message.role == 'user' and message.content is string
        and not message.content.startswith('<tool_response>') %}
    {%- set ns.last_query = loop.index0 %}
  {%- endif %}
{%- endfor %}
{%- if ns.last_query < 0 %}{{- raise_exception('No user query found in messages.') }}{%- endif %}
{%- for message in messages %}
  {%- if message.role == 'system' %}
    {%- if not loop.first %}{{- raise_exception('The system turn must come first.') }}{%- endif %}
  {%- elif message.role == 'user' %}
    {{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}
  {%- elif message.role == 'assistant' %}
    {{- '<|im_start|>assistant\\n' + (message.content or '') }}
    {%- for call in message.tool_calls or [] %}
      {{- '\\n<tool_call>\\n' + (call.function | tojson) + '\\n</tool_call>' }}
    {%- endfor %}
    {{- '<|im_end|>\\n' }}
  {%- elif message.role == 'tool' %}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
      {{- '<|im_start|>user' }}
    {%- endif %}
    {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
      {{- '<|im_end|>\\n' }}
    {%- endif %}
  {%- else %}
    {{- raise_exception('Unknown role ' + message.role) }}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""
TEMPLATES = {"tiny": TINY_TEMPLATE, "qwen3-style": QWEN3_STYLE}
MATCHER = VolatileMatcher({})
RULES = "Answer with one tool call at a time. Keep answers short."
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("run_tests", "read_file", "write_file", "list_dir")
]


def _render(template: str, body: dict[str, Any]) -> str:
    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=body["messages"], tools=body.get("tools"), add_generation_prompt=True
    )


def _turn(step: int) -> list[dict[str, Any]]:
    """One step of the loop: the assistant calls a tool, the tool answers."""
    call = {"id": f"call_{step}", "type": "function"}
    call["function"] = {"name": "read_file", "arguments": f'{{"path": "f{step}.py"}}'}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{step}", "content": f"contents of f{step}.py"},
    ]


def _request(steps: int, stamp: str, request_id: str, tools_seed: int) -> dict[str, Any]:
    system = f"{RULES}\nCurrent time: {stamp}. Request id: {request_id}."
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Fix the failing test in the repository."},
    ]
    for step in range(steps):
        messages += _turn(step)
    tools = copy.deepcopy(TOOLS)
    tools = tools[tools_seed % len(tools) :] + tools[: tools_seed % len(tools)]
    return {"model": "tiny", "messages": messages, "tools": tools}


def _shared(a: str, b: str) -> int:
    """How many characters `a` and `b` share from their start."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


REQUESTS = [
    _request(1, "2026-12-02T06:50:11Z", "0f3c2a9b7e6d4c1a8b5e3d2c", 0),
    _request(2, "2026-12-02T06:50:14Z", "7a1e9c0b5d3f2e4a6b8c9d0e", 1),
    _request(3, "2026-12-02T06:50:19Z", "e5d4c3b2a1f0e9d8c7b6a5f4", 2),
]


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_rewritten_agent_loop_renders_with_a_stable_system_and_tools_block(name: str) -> None:
    template = TEMPLATES[name]
    raw = [_render(template, body) for body in REQUESTS]
    rewritten = [rewrite_chat(body, MATCHER)[0] for body in REQUESTS]
    rendered = [_render(template, body) for body in rewritten]
    block_end = rendered[0].index("<|im_end|>") + len("<|im_end|>")
    assert RULES in rendered[0][:block_end] and "run_tests" in rendered[0][:block_end]
    for (body, before), after in zip(
        zip(REQUESTS, rendered, strict=True), rendered[1:], strict=False
    ):
        # The whole system turn with its tools is shared, and then the conversation up
        # to the previous request's last turn, which held the moved values.
        assert _shared(before, after) >= before.index(body["messages"][-1]["content"])
    for before, after in itertools.pairwise(raw):
        assert _shared(before, after) < block_end  # the timestamp ended it
    for body, text in zip(REQUESTS, rendered, strict=True):
        system = body["messages"][0]["content"]
        stamp = system.split("Current time: ")[1].split(". ")[0]
        request_id = system.split("Request id: ")[1].rstrip(".")
        # Nothing lost: the values come after every turn of the conversation, in order.
        turns = [m["content"] for m in body["messages"][1:] if m["content"]]
        positions = [text.index(turn) for turn in turns]
        assert positions == sorted(positions)
        assert text.index(stamp) > positions[-1] and text.index(request_id) > positions[-1]


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_a_rewritten_request_ending_with_a_user_turn_renders(name: str) -> None:
    """The values go to the last user turn, which a Qwen3-style template still takes
    for the last query (its text is a string that is not a tool response)."""
    body = _request(1, "2026-12-02T06:50:11Z", "0f3c2a9b7e6d4c1a8b5e3d2c", 0)
    body["messages"].append({"role": "user", "content": "Now run the tests."})
    rewritten, report = rewrite_chat(body, MATCHER)
    assert report.moved and "2026-12-02T06:50:11Z" in rewritten["messages"][-1]["content"]
    text = _render(TEMPLATES[name], rewritten)
    assert text.index("Now run the tests.") < text.index("2026-12-02T06:50:11Z")
    assert text.rstrip().endswith("<|im_start|>assistant")


def test_the_qwen3_style_template_refuses_what_its_originals_refuse() -> None:
    """So that a rewrite that broke those rules would fail the tests above."""
    body = _request(1, "2026-12-02T06:50:11Z", "0f3c2a9b7e6d4c1a8b5e3d2c", 0)
    late_system = {**body, "messages": [*body["messages"], body["messages"][0]]}
    with pytest.raises(TemplateError, match="system turn must come first"):
        _render(QWEN3_STYLE, late_system)
    no_query = {**body, "messages": [body["messages"][0], *_turn(0)]}
    with pytest.raises(TemplateError, match="No user query"):
        _render(QWEN3_STYLE, no_query)
