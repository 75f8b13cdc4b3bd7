"""Agent loop (the prefix-cache article): a long stable prefix and a growing tail of tool results.

Layout as a typical coding agent sends it: system prompt (persona, fixed rules,
then the current time — a volatile value), tool schemas, repository context and
task, then per turn an assistant tool call and its result.  The timestamp moves
every turn, so a direct request reuses the cache only up to it; a gateway that
moves volatile values last (the prefix-cache article) keeps the whole prefix cacheable.
Histories are synthetic (not the model's output) so every run sends the same
tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.client import ChatClient, ChatRequest
from bench.records import RequestRecord
from bench.scale import Scale
from bench.stats import ratio
from bench.text import rng_for, words
from bench.workloads import FIT_AIM, FIT_ROUNDS, TEMPLATE_MARGIN_TOKENS, Context, Messages

NAME = "agent-loop"
TOOL_NAMES = ("read_file", "search_code", "run_tests", "list_dir", "apply_patch", "git_diff")
BASE_TIME = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
SECONDS_PER_TURN = 97


def planned_requests(scale: Scale, targets: int) -> int:
    return scale.agent_turns * targets


def tools(seed: int) -> list[dict[str, Any]]:
    out = []
    for name in TOOL_NAMES:
        rng = rng_for(seed, NAME, "tool", name)
        out.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": words(rng, 24),
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string", "description": words(rng, 10)},
                            "query": {"type": "string", "description": words(rng, 10)},
                        },
                        "required": ["path"],
                    },
                },
            }
        )
    return out


def timestamp(turn: int) -> str:
    moment = BASE_TIME + timedelta(seconds=SECONDS_PER_TURN * turn)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def system_prompt(scale: Scale, seed: int, turn: int) -> str:
    rng = rng_for(seed, NAME, "rules")
    rules = words(rng, scale.agent_rules_words)
    return (
        "You are a careful coding agent working in a repository.\n"
        f"Rules: {rules}\n"
        f"Current date and time: {timestamp(turn)}"
    )


def repository_context(scale: Scale, seed: int) -> str:
    parts = []
    for i in range(scale.agent_repo_files):
        rng = rng_for(seed, NAME, "file", i)
        parts.append(f"### src/module_{i}.py\n{words(rng, scale.agent_file_words)}")
    task = words(rng_for(seed, NAME, "task"), 30)
    return "Repository context:\n" + "\n\n".join(parts) + f"\n\nTask: {task}"


def tool_exchange(scale: Scale, seed: int, step: int) -> Messages:
    rng = rng_for(seed, NAME, "step", step)
    name = TOOL_NAMES[step % len(TOOL_NAMES)]
    call_id = f"call_{step}"
    arguments = json.dumps({"path": f"src/module_{step}.py", "query": words(rng, 3)})
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": words(rng, scale.agent_tool_result_words),
        },
    ]


def messages_for(scale: Scale, seed: int, turn: int) -> Messages:
    messages: Messages = [
        {"role": "system", "content": system_prompt(scale, seed, turn)},
        {"role": "user", "content": repository_context(scale, seed)},
    ]
    for step in range(turn):
        messages += tool_exchange(scale, seed, step)
    return messages


def request_for(scale: Scale, seed: int, turn: int) -> ChatRequest:
    return ChatRequest(
        workload=NAME,
        group="turn",
        index=turn,
        messages=messages_for(scale, seed, turn),
        max_tokens=scale.agent_max_tokens,
        tools=tools(seed),
    )


async def run_target(ctx: Context, client: ChatClient) -> list[RequestRecord]:
    return [
        await ctx.send(client, request_for(ctx.scale, ctx.seed, turn))
        for turn in range(ctx.scale.agent_turns)
    ]


def shrunk(scale: Scale, factor: float) -> Scale:
    """The agent-loop sizes times `factor` (turns and file count kept)."""
    return replace(
        scale,
        agent_rules_words=max(1, int(scale.agent_rules_words * factor)),
        agent_file_words=max(1, int(scale.agent_file_words * factor)),
        agent_tool_result_words=max(1, int(scale.agent_tool_result_words * factor)),
    )


async def fitted_scale(ctx: Context) -> Scale:
    """The scale whose last turn fits max_model_len (sizes shrunk when it does not)."""
    limit = ctx.max_model_len - ctx.scale.agent_max_tokens - TEMPLATE_MARGIN_TOKENS
    scale = ctx.scale
    for _ in range(FIT_ROUNDS):
        last = request_for(scale, ctx.seed, scale.agent_turns - 1)
        count = await ctx.tokens(last.messages, last.tools)
        if count is None or count <= limit:
            return scale
        scale = shrunk(scale, FIT_AIM * limit / count)
    return scale


async def run(ctx: Context) -> list[RequestRecord]:
    fitted = replace(ctx, scale=await fitted_scale(ctx))
    records: list[RequestRecord] = []
    for client in ctx.clients:
        records += await run_target(fitted, client)
    return records


def turn_row(record: RequestRecord) -> dict[str, Any]:
    cached = record.cached_tokens
    return {
        "turn": record.index,
        "prompt_tokens": record.prompt_tokens,
        "cached_tokens": cached,
        "recomputed_tokens": record.recomputed_tokens,
        "hit_rate": None if cached is None else ratio(cached, record.prompt_tokens),
        "ttft_s": record.ttft_s,
        "error": record.error,
    }


def target_summary(records: Sequence[RequestRecord]) -> dict[str, Any]:
    turns = sorted(records, key=lambda r: r.index)
    later = [r for r in turns if r.index > 0 and r.ok]
    reported = all(r.cached_tokens is not None for r in later)
    cached = sum(r.cached_tokens or 0 for r in later)
    prompt = sum(r.prompt_tokens for r in later)
    ttfts = [r.ttft_s for r in later if r.ttft_s is not None]
    return {
        "turns": [turn_row(r) for r in turns],
        "cached_tokens_reported": reported,
        "cached_tokens_after_first": cached,
        "prompt_tokens_after_first": prompt,
        "hit_rate_after_first": ratio(cached, prompt) if reported else None,
        "mean_ttft_after_first_s": sum(ttfts) / len(ttfts) if ttfts else None,
    }


def summarize(records: Sequence[RequestRecord]) -> dict[str, Any]:
    by_target: dict[str, list[RequestRecord]] = {}
    for record in records:
        by_target.setdefault(record.target, []).append(record)
    return {"targets": {name: target_summary(rs) for name, rs in by_target.items()}}
