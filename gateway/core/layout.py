"""Prefix-stable layout of chat requests: stable parts first, volatile last (the
prefix-cache article, docs/sources.md).

vLLM's prefix cache hits only on an identical token prefix.  `rewrite_chat`
returns a copy of a chat-completions body in which

- tools are sorted by function name and every JSON object in them has sorted keys;
- volatile values in system/developer messages (timestamps, dates, clock times,
  UUIDs, long hex ids, configured regex rules) are replaced by stable
  placeholders such as `[timestamp_1]`, and the values are appended, labelled, to
  the content of the last user/tool message, so every chat template accepts it.

No turn is dropped or reordered and no content is lost.  Applying the rewrite
to its own output changes nothing (idempotent).  Pure: no I/O, no shared state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.core.jsoncodec import dumps

# Most specific first: a timestamp contains a date and a clock time.
BUILTIN_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "timestamp",
        r"(?<!\d)\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
        r"(?:Z|[+-]\d{2}:?\d{2})?(?!\d)",
    ),
    (
        "uuid",
        r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}(?![0-9A-Fa-f])",
    ),
    ("date", r"(?<!\d)(?:\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{4})(?!\d)"),
    ("time", r"(?<![\d:])\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp][Mm]\b)?(?![\d:])"),
    ("hex_id", r"(?<![0-9A-Za-z])[0-9A-Fa-f]{16,}(?![0-9A-Za-z])"),
)
STABLE_ROLES = frozenset({"system", "developer"})
TARGET_ROLES = frozenset({"user", "tool"})
TRAILER_HEADING = "[Values moved here from the system prompt]"


@dataclass
class LayoutReport:
    """What the rewrite changed; `header()` is the `x-sparkserve-layout` value."""

    # Plain dicts, not `collections.Counter`: cheaper to make, once per request.
    moved: dict[str, int] = field(default_factory=dict)
    tools_sorted: bool = False
    schemas_canonical: bool = False

    def kinds(self) -> dict[str, int]:
        counts = dict(self.moved)
        if self.tools_sorted:
            counts["tools_sorted"] = 1
        if self.schemas_canonical:
            counts["schemas_canonical"] = 1
        return counts

    def header(self) -> str:
        parts = []
        if self.moved:
            parts.append("moved=" + ",".join(f"{k}:{n}" for k, n in sorted(self.moved.items())))
        if self.tools_sorted or self.schemas_canonical:
            done = [("sorted", self.tools_sorted), ("canonical", self.schemas_canonical)]
            parts.append("tools=" + "+".join(name for name, on in done if on))
        return ";".join(parts) or "unchanged"


# Where a built-in pattern can begin: a digit (timestamp, date, time) or a run of
# eight hex characters (uuid, hex_id).  A regex that starts with a character set is
# searched quickly; the alternation, with its look-behinds, tried at every character
# of a long system prompt cost ~0.3 us a character (docs/gateway.md, "Overhead").
_BUILTIN_START = re.compile(r"[0-9A-Fa-f](?:(?<=[0-9])|[0-9A-Fa-f]{7})")


class VolatileMatcher:
    """One compiled alternation of the configured rules and the built-in patterns.

    Without configured rules the alternation is tried only where a built-in pattern
    can begin (`_BUILTIN_START`), with the same result as `re.sub` over the whole
    text: leftmost match first, the first alternative that matches there."""

    def __init__(self, rules: Mapping[str, str]) -> None:
        self.kinds = [*rules, *(kind for kind, _ in BUILTIN_PATTERNS)]
        patterns = [*rules.values(), *(pattern for _, pattern in BUILTIN_PATTERNS)]
        alternation = "|".join(f"(?P<k{i}>{p})" for i, p in enumerate(patterns))
        self._regex = re.compile(alternation)
        self._anywhere = bool(rules)  # a configured rule may begin with any character

    def substitute(self, text: str, values: dict[str, str], moved: dict[str, int]) -> str:
        """Replace each volatile value by its placeholder, recording it in `values`."""

        def replace(match: re.Match[str]) -> str:
            kind = self._kind(match)
            value = match.group(0)
            for placeholder, known in values.items():
                if known == value:
                    return placeholder
            moved[kind] = number = moved.get(kind, 0) + 1
            placeholder = f"[{kind}_{number}]"
            values[placeholder] = value
            return placeholder

        if self._anywhere:
            return self._regex.sub(replace, text)
        parts: list[str] = []
        search, match = _BUILTIN_START.search, self._regex.match
        position = done = 0
        while (candidate := search(text, position)) is not None:
            start = candidate.start()
            found = match(text, start)  # look-behinds still see the text before `start`
            if found is None:
                position = start + 1
                continue
            parts += (text[done:start], replace(found))
            position = done = found.end()  # no built-in pattern matches empty text
        if not parts:
            return text
        parts.append(text[done:])
        return "".join(parts)

    def _kind(self, match: re.Match[str]) -> str:
        for i, kind in enumerate(self.kinds):
            if match.group(f"k{i}") is not None:
                return kind
        raise AssertionError("a match always has one alternative")


def canonical_json(value: Any) -> Any:
    """A copy of `value` with every object's keys sorted (lists keep their order)."""
    if isinstance(value, dict):
        return {key: canonical_json(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical_json(item) for item in value]
    return value


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
        if isinstance(tool.get("name"), str):
            return str(tool["name"])
    return ""


def canonical_tools(tools: list[Any], report: LayoutReport) -> list[Any]:
    ordered = sorted(tools, key=_tool_name)
    report.tools_sorted = [_tool_name(t) for t in ordered] != [_tool_name(t) for t in tools]
    canonical = [canonical_json(tool) for tool in ordered]
    report.schemas_canonical = dumps(canonical) != dumps(ordered)
    return canonical


def _substitute_content(
    content: Any, matcher: VolatileMatcher, values: dict[str, str], moved: dict[str, int]
) -> Any:
    if isinstance(content, str):
        return matcher.substitute(content, values, moved)
    if isinstance(content, list):
        return [
            {**part, "text": matcher.substitute(part["text"], values, moved)}
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
    return content


def _role(message: Any) -> str | None:
    """A message's role when it is a string (clients send anything; vLLM judges)."""
    role = message.get("role") if isinstance(message, dict) else None
    return role if isinstance(role, str) else None


def _target_index(messages: list[Any]) -> int | None:
    """The last user/tool message: the end of the prompt in every common template."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if _role(message) in TARGET_ROLES:
            return index
    return None


def _append_trailer(message: dict[str, Any], values: Mapping[str, str]) -> dict[str, Any]:
    lines = "\n".join(f"{placeholder}: {value}" for placeholder, value in values.items())
    trailer = f"{TRAILER_HEADING}\n{lines}"
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": "\n\n" + trailer}]}
    if isinstance(content, str) and content:
        return {**message, "content": f"{content}\n\n{trailer}"}
    return {**message, "content": trailer}


def move_volatile(messages: list[Any], matcher: VolatileMatcher, report: LayoutReport) -> list[Any]:
    target = _target_index(messages)
    if target is None:
        return messages
    values: dict[str, str] = {}
    moved: dict[str, int] = {}
    rewritten = []
    for index, message in enumerate(messages):
        if index < target and _role(message) in STABLE_ROLES:
            content = _substitute_content(message.get("content"), matcher, values, moved)
            message = {**message, "content": content}
        rewritten.append(message)
    if not values:
        return messages
    rewritten[target] = _append_trailer(rewritten[target], values)
    for kind, count in moved.items():
        report.moved[kind] = report.moved.get(kind, 0) + count
    return rewritten


def rewrite_chat(
    body: Mapping[str, Any], matcher: VolatileMatcher
) -> tuple[dict[str, Any], LayoutReport]:
    """The prefix-stable copy of a chat-completions request body and what changed."""
    report = LayoutReport()
    result = dict(body)
    if isinstance(body.get("tools"), list):
        result["tools"] = canonical_tools(body["tools"], report)
    if isinstance(body.get("messages"), list):
        result["messages"] = move_volatile(list(body["messages"]), matcher, report)
    return result, report
