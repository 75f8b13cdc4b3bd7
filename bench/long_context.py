"""Long context: a prompt near max_model_len → TTFT and prefill tokens/s."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from bench.client import ChatRequest
from bench.records import RequestRecord
from bench.scale import Scale
from bench.stats import dist_dict, rate
from bench.text import rng_for, words
from bench.workloads import TEMPLATE_MARGIN_TOKENS, Context, Messages, fit_prompt

NAME = "long-context"


def planned_requests(scale: Scale) -> int:
    return scale.long_requests


def document(seed: int, index: int, n_words: int) -> Messages:
    text = words(rng_for(seed, NAME, index), n_words)
    return [{"role": "user", "content": f"Read this and answer briefly:\n{text}"}]


def target_tokens(scale: Scale, max_model_len: int) -> int:
    fill = int(max_model_len * scale.long_fill)
    return min(fill, max_model_len - scale.long_max_tokens - TEMPLATE_MARGIN_TOKENS)


async def run(ctx: Context) -> list[RequestRecord]:
    target = target_tokens(ctx.scale, ctx.max_model_len)
    records = []
    for i in range(ctx.scale.long_requests):
        messages, _ = await fit_prompt(ctx, partial(document, ctx.seed, i), target)
        request = ChatRequest(NAME, "long", i, messages, max_tokens=ctx.scale.long_max_tokens)
        records.append(await ctx.send(ctx.primary, request))
    return records


def summarize(records: Sequence[RequestRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.ok and r.ttft_s is not None]
    rows = [
        {
            "index": r.index,
            "prompt_tokens": r.prompt_tokens,
            "cached_tokens": r.cached_tokens,
            "ttft_s": r.ttft_s,
            "prefill_tok_s": rate(r.recomputed_tokens, r.ttft_s or 0.0),
        }
        for r in ok
    ]
    return {
        "requests": rows,
        "errors": len(records) - len(ok),
        "ttft_s": dist_dict(r.ttft_s for r in ok if r.ttft_s is not None),
        "prefill_tok_s": dist_dict(row["prefill_tok_s"] for row in rows if row["prefill_tok_s"]),
    }
