"""Short chat: many short prompts at concurrency 1…N → aggregate tokens/s, TTFT, ITL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.client import ChatRequest
from bench.records import RequestRecord
from bench.scale import Scale
from bench.stats import dist_dict, rate
from bench.text import rng_for, words
from bench.workloads import Context, gather_limited

NAME = "short-chat"


def planned_requests(scale: Scale) -> int:
    return sum(scale.chat_requests(c) for c in scale.chat_concurrency)


def requests_for(scale: Scale, seed: int, concurrency: int) -> list[ChatRequest]:
    out = []
    for i in range(scale.chat_requests(concurrency)):
        rng = rng_for(seed, NAME, concurrency, i)
        question = words(rng, scale.chat_prompt_words)
        out.append(
            ChatRequest(
                workload=NAME,
                group=f"c={concurrency}",
                index=i,
                messages=[{"role": "user", "content": f"Question {i}: {question}"}],
                max_tokens=scale.chat_max_tokens,
            )
        )
    return out


async def run(ctx: Context) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    for concurrency in ctx.scale.chat_concurrency:
        requests = requests_for(ctx.scale, ctx.seed, concurrency)
        jobs = (ctx.send(ctx.primary, request) for request in requests)
        records += await gather_limited(concurrency, jobs)
    return records


def level_summary(records: Sequence[RequestRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    wall_s = max(r.end_s for r in records) - min(r.start_s for r in records)
    output_tokens = sum(r.completion_tokens for r in ok)
    return {
        "requests": len(records),
        "errors": len(records) - len(ok),
        "wall_s": wall_s,
        "output_tokens": output_tokens,
        "output_tok_s": rate(output_tokens, wall_s),
        "requests_per_s": rate(len(ok), wall_s),
        "ttft_s": dist_dict(r.ttft_s for r in ok if r.ttft_s is not None),
        "itl_s": dist_dict(g for r in ok for g in r.chunk_gaps_s),
        "tpot_s": dist_dict(r.itl_s for r in ok if r.itl_s is not None),
        "e2e_s": dist_dict(r.e2e_s for r in ok),
    }


def summarize(records: Sequence[RequestRecord]) -> dict[str, Any]:
    levels: dict[str, list[RequestRecord]] = {}
    for record in records:
        levels.setdefault(record.group, []).append(record)
    per_level = {group: level_summary(rs) for group, rs in levels.items()}
    best = max(
        (s["output_tok_s"] or 0.0 for s in per_level.values()),
        default=0.0,
    )
    return {"levels": per_level, "best_output_tok_s": best}
