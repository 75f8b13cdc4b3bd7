"""Mixed traffic (the tuning article §5.3): D streaming decodes while a long prompt arrives.

Two probes first: the long prompt's prefill alone (a different text of the same
size, so it leaves nothing in the cache for the measured one) and one short
decode, to size the decode streams so they outlast the measured prefill.  Then
D decodes start; once each has streamed `lead` chunks the long prompt is sent.
The report: inter-chunk gaps of the decode streams while the prompt is in
prefill (p50/p95/p99, vs. before it), and that prompt's prefill tokens/s.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

from bench.client import ChatRequest, OnOutput
from bench.errors import BenchError
from bench.records import RequestRecord
from bench.scale import Scale
from bench.stats import dist_dict, gaps_in_window, rate
from bench.text import rng_for, words
from bench.workloads import Context, Messages, fit_prompt

NAME = "mixed"
DECODE_PROMPT_WORDS = 16
PROBE_DECODE_TOKENS = 16
# Decode streams run this many times the solo prefill time past the lead tokens: next
# to decodes a prefill runs several times slower than alone (4× seen on 2 CPU cores).
OUTLAST_FACTOR = 8.0
# Floor of the probe's time per token: small models stream tokens in bursts (≈0 apart)
# and decode a token in well under a millisecond; the budget is then the room left.
MIN_TOKEN_S = 0.0001
OUTPUT_MARGIN_TOKENS = 64


def planned_requests(scale: Scale) -> int:
    return 2 + scale.mixed_decode_streams + 1


def long_messages(seed: int, variant: str, n_words: int) -> Messages:
    text = words(rng_for(seed, NAME, "long", variant), n_words)
    return [{"role": "user", "content": f"Summarise this document:\n{text}"}]


def decode_request(seed: int, index: int, group: str, max_tokens: int) -> ChatRequest:
    text = words(rng_for(seed, NAME, group, index), DECODE_PROMPT_WORDS)
    return ChatRequest(
        workload=NAME,
        group=group,
        index=index,
        messages=[{"role": "user", "content": f"Write a long story about {text}"}],
        max_tokens=max_tokens,
    )


def decode_budget(scale: Scale, prefill_s: float, itl_s: float, room: int) -> int:
    """Output tokens per decode stream so it keeps streaming through the prefill."""
    per_token_s = max(itl_s, MIN_TOKEN_S)
    wanted = scale.mixed_lead_tokens + math.ceil(OUTLAST_FACTOR * prefill_s / per_token_s)
    return max(scale.mixed_lead_tokens + 1, min(wanted, room))


async def _probes(ctx: Context, target_tokens: int) -> tuple[Messages, int, list[RequestRecord]]:
    """Probe prefill and decode; return the measured long prompt, the decode budget and
    the probes' records."""
    probe_msgs, _ = await fit_prompt(
        ctx, lambda n: long_messages(ctx.seed, "probe", n), target_tokens
    )
    measured, _ = await fit_prompt(ctx, lambda n: long_messages(ctx.seed, "run", n), target_tokens)
    prefill = await ctx.send(
        ctx.primary, ChatRequest(NAME, "probe-prefill", 0, probe_msgs, max_tokens=1)
    )
    decode = await ctx.send(
        ctx.primary, decode_request(ctx.seed, 0, "probe-decode", PROBE_DECODE_TOKENS)
    )
    if not (prefill.ok and decode.ok) or prefill.ttft_s is None or decode.itl_s is None:
        raise BenchError(f"mixed: probe requests failed: {prefill.error or decode.error}")
    room = ctx.max_model_len - DECODE_PROMPT_WORDS * 4 - OUTPUT_MARGIN_TOKENS
    budget = decode_budget(ctx.scale, prefill.ttft_s, decode.itl_s, room)
    return measured, budget, [prefill, decode]


async def run(ctx: Context) -> list[RequestRecord]:
    target = int(ctx.max_model_len * ctx.scale.mixed_prompt_fill)
    long_msgs, budget, probes = await _probes(ctx, target)
    lead = ctx.scale.mixed_lead_tokens
    started = [asyncio.Event() for _ in range(ctx.scale.mixed_decode_streams)]

    def watcher(event: asyncio.Event) -> OnOutput:
        def on_output(chunks: int) -> None:
            if chunks >= lead:
                event.set()

        return on_output

    decodes = [
        asyncio.create_task(
            ctx.primary.send(decode_request(ctx.seed, i, "decode", budget), watcher(started[i]))
        )
        for i in range(ctx.scale.mixed_decode_streams)
    ]
    await _wait_started(started, decodes)
    prefill = await ctx.send(ctx.primary, ChatRequest(NAME, "prefill", 0, long_msgs, max_tokens=1))
    records = list(await asyncio.gather(*decodes))
    for record in records:
        ctx.sink(record)
    return [*probes, *records, prefill]


async def _wait_started(
    started: Sequence[asyncio.Event], decodes: Sequence[asyncio.Task[RequestRecord]]
) -> None:
    """Until every stream has its lead tokens (or has ended, e.g. on an error)."""
    for event, task in zip(started, decodes, strict=True):
        waiter = asyncio.create_task(event.wait())
        await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()


def summarize(records: Sequence[RequestRecord]) -> dict[str, Any]:
    groups = {
        r.group: r for r in records if r.group in ("probe-prefill", "probe-decode", "prefill")
    }
    decodes = [r for r in records if r.group == "decode"]
    prefill = groups.get("prefill")
    if prefill is None or prefill.first_token_s is None:
        return {"error": "the long prompt produced no token"}
    start, end = prefill.start_s, prefill.first_token_s
    during = [g for r in decodes for g in gaps_in_window(r.chunk_times_s, start, end)]
    before = [g for r in decodes for g in gaps_in_window(r.chunk_times_s, 0.0, start)]
    probe = groups.get("probe-prefill")
    computed = prefill.recomputed_tokens
    return {
        "decode_streams": len(decodes),
        "prompt_tokens": prefill.prompt_tokens,
        "cached_tokens": prefill.cached_tokens,
        "prefill_window_s": [start, end],
        "ttft_s": prefill.ttft_s,
        "prefill_tok_s": rate(computed, end - start),
        "solo_prefill_tok_s": rate(probe.recomputed_tokens, probe.ttft_s or 0.0) if probe else None,
        "gap_during_prefill_s": dist_dict(during),
        "gap_before_prefill_s": dist_dict(before),
        "streams_outlasted_prefill": all(r.end_s >= end for r in decodes),
        "errors": sum(1 for r in records if not r.ok),
    }
