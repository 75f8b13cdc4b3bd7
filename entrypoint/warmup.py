"""Warm-up before ready: send the request shapes users will send, so the first real
request meets no lazy compilation, graph capture or allocator growth.

Steps: a short chat; a streamed chat; a prompt longer than max_num_batched_tokens
(several prefill chunks); one prompt of each batch size vLLM's fused-MoE kernels are
tuned for, up to the chunk; S concurrent decodes for each S (all of 1..max_num_seqs
up to 16, else a spread covering the CUDA graph sizes); with MTP, a few hundred
decode tokens. Each step is timed and printed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from entrypoint.console import Console
from entrypoint.state import Lifecycle

ALL_WIDTHS_UP_TO = 16
LONG_PROMPT_CHUNKS = 2.5
DECODE_TOKENS = 16
MTP_DECODE_TOKENS = 300
SEED_TEXT = "The budget planner sizes the KV cache so every request fits in memory. "
# The batch sizes (tokens) vLLM's tuned fused-MoE configs are keyed by
# (vllm/model_executor/layers/fused_moe/configs/*.json). fused_moe.py takes the key
# closest to a batch's token count, and each distinct tile config is its own Triton
# compile: on the H200, a first batch of 256 tokens waited 0.9 s for one with a cold
# cache (docs/gpu-entrypoint.md). Triton also compiles a variant per config for token
# counts whose product with top-k is or is not a multiple of 16 (seen in vLLM's
# --jit-monitor-verbose keys there), so each size is sent as n and n + 1 tokens.
# Decode widths cover the keys below 24.
MOE_BATCH_TOKENS = (24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)


class StepFailed(Exception):
    """vLLM answered a warm-up request with an error status (it is still serving)."""


@dataclass(frozen=True)
class Shape:
    """The serving shape warm-up exercises (the plan's resolved settings)."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    mtp: int
    capture_sizes: tuple[int, ...] = ()
    # MoE on a GPU: vLLM's fused-MoE Triton kernels compile per batch size (MOE_BATCH_TOKENS).
    fused_moe: bool = False


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    run: Callable[[httpx.Client], None]


def decode_widths(shape: Shape) -> list[int]:
    """Each S to decode with; every (K+1)×S graph size maps to one of them."""
    n = shape.max_num_seqs
    if n <= ALL_WIDTHS_UP_TO:
        return list(range(1, n + 1))
    widths = {*range(1, 9), n, *(2**i for i in range(int(math.log2(n)) + 1))}
    widths |= {math.ceil(size / (shape.mtp + 1)) for size in shape.capture_sizes}
    return sorted(w for w in widths if 1 <= w <= n)


def long_prompt_tokens(shape: Shape) -> int:
    wanted = int(shape.max_num_batched_tokens * LONG_PROMPT_CHUNKS)
    return max(1, min(wanted, shape.max_model_len - 2))


def prefill_sizes(shape: Shape) -> list[int]:
    """One prompt length per fused-MoE batch key below the chunk (the long prompt's
    chunks cover the chunk itself); none without fused-MoE kernels."""
    if not shape.fused_moe:
        return []
    limit = min(shape.max_num_batched_tokens, shape.max_model_len - 2)
    return [tokens for tokens in MOE_BATCH_TOKENS if tokens < limit]


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post(path, json=body)
    if answer.status_code != 200:
        raise StepFailed(f"{path} answered {answer.status_code}: {answer.text[:200]}")
    result: dict[str, Any] = answer.json()
    return result


def prompt_ids(client: httpx.Client, model: str, length: int, lead: str = "") -> list[int]:
    """`length` token ids of real text, via vLLM's /tokenize; `lead` opens the text (a
    prompt of its own, which shares no cached prefix with the others)."""
    body = {"model": model, "prompt": lead + SEED_TEXT}
    ids: list[int] = _post(client, "/tokenize", body)["tokens"]
    return (ids * (length // max(len(ids), 1) + 1))[:length]


def _chat(model: str, stream: bool) -> Callable[[httpx.Client], None]:
    body = {
        "model": model,
        "max_tokens": 8,
        "stream": stream,
        "messages": [{"role": "user", "content": "Hello! Say hi back."}],
    }

    def run(client: httpx.Client) -> None:
        if not stream:
            _post(client, "/v1/chat/completions", body)
            return
        with client.stream("POST", "/v1/chat/completions", json=body) as answer:
            if answer.status_code != 200:
                raise StepFailed(f"streamed chat answered {answer.status_code}")
            for _ in answer.iter_lines():
                pass

    return run


def _complete(model: str, prompt: list[int], max_tokens: int) -> Callable[[httpx.Client], None]:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}

    def run(client: httpx.Client) -> None:
        _post(client, "/v1/completions", body)

    return run


def _prefills(model: str, prompts: list[list[int]]) -> Callable[[httpx.Client], None]:
    def run(client: httpx.Client) -> None:
        for prompt in prompts:
            _complete(model, prompt, 1)(client)

    return run


def _concurrent(model: str, ids: list[int], width: int) -> Callable[[httpx.Client], None]:
    def run(client: httpx.Client) -> None:
        with ThreadPoolExecutor(max_workers=width) as pool:
            # Distinct prompts (rotated), so each sequence decodes on its own.
            prompts = [[*ids[i % len(ids) :], *ids[: i % len(ids)], *ids] for i in range(width)]
            jobs = [
                pool.submit(_complete(model, prompt, DECODE_TOKENS), client) for prompt in prompts
            ]
            for job in jobs:
                job.result()

    return run


def build_steps(client: httpx.Client, model: str, shape: Shape) -> list[Step]:
    long_len = long_prompt_tokens(shape)
    chunks = math.ceil(long_len / shape.max_num_batched_tokens)
    short = prompt_ids(client, model, 8)
    steps = [
        Step("chat", "short chat", _chat(model, stream=False)),
        Step("stream", "streamed chat", _chat(model, stream=True)),
        Step(
            "long_prompt",
            f"prompt of {long_len:,} tokens ({chunks} prefill chunk(s) of "
            f"{shape.max_num_batched_tokens:,})",
            _complete(model, prompt_ids(client, model, long_len), 1),
        ),
    ]
    if sizes := prefill_sizes(shape):
        lengths = [length for n in sizes for length in (n, n + 1)]
        prompts = [prompt_ids(client, model, n, lead=f"prefill {n}: ") for n in lengths]
        steps.append(
            Step(
                "prefill_sizes",
                f"{len(lengths)} prompts of {lengths[0]:,} to {lengths[-1]:,} tokens "
                "(each fused-MoE batch size, n and n + 1)",
                _prefills(model, prompts),
            )
        )
    for width in decode_widths(shape):
        steps.append(
            Step(
                f"decode_x{width}",
                f"{width} concurrent decode(s) × {DECODE_TOKENS} tokens",
                _concurrent(model, short, width),
            )
        )
    if shape.mtp:
        steps.append(
            Step(
                "mtp_decode",
                f"{MTP_DECODE_TOKENS} decode tokens with MTP {shape.mtp}",
                _complete(model, short, MTP_DECODE_TOKENS),
            )
        )
    return steps


def served_model(client: httpx.Client) -> str:
    answer = client.get("/v1/models")
    if answer.status_code != 200:
        raise StepFailed(f"/v1/models answered {answer.status_code}")
    return str(answer.json()["data"][0]["id"])


def run_warmup(client: httpx.Client, shape: Shape, console: Console, lifecycle: Lifecycle) -> float:
    """Run every step in order; the total seconds."""
    started = time.monotonic()
    try:
        steps = build_steps(client, served_model(client), shape)
    except StepFailed as exc:
        console.say(f"warning: warm-up skipped: {exc}")
        return time.monotonic() - started
    for number, step in enumerate(steps, 1):
        step_started = time.monotonic()
        try:
            step.run(client)
        except StepFailed as exc:
            console.say(f"warning: warm-up step {number}/{len(steps)} ({step.what}) failed: {exc}")
            continue
        seconds = time.monotonic() - step_started
        lifecycle.add_warmup_step(step.name, seconds)
        console.phase(f"warm-up step {number}/{len(steps)}: {step.what}: {seconds:.2f} s")
    return time.monotonic() - started
