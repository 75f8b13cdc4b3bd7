"""Hand-made records and a summary built from them (no server)."""

from bench import agent_loop, long_context, mixed, short_chat
from bench.records import RequestRecord


def rec(
    workload,
    group,
    index,
    start,
    chunks,
    prompt=100,
    completion=None,
    cached=0,
    target="direct",
    error=None,
):
    return RequestRecord(
        workload=workload,
        target=target,
        group=group,
        index=index,
        start_s=start,
        end_s=(chunks[-1] if chunks else start) + 0.001,
        chunk_times_s=tuple(chunks),
        prompt_tokens=prompt,
        completion_tokens=len(chunks) if completion is None else completion,
        cached_tokens=cached,
        error=error,
    )


def records():
    chat = [rec("short-chat", "c=1", i, i * 1.0, [i + 0.1, i + 0.15, i + 0.2]) for i in range(2)]
    chat += [rec("short-chat", "c=2", i, 3.0, [3.2, 3.3, 3.4]) for i in range(2)]
    agent = [
        rec(
            "agent-loop",
            "turn",
            t,
            10.0 + t,
            [10.5 + t],
            prompt=1000 + 100 * t,
            cached=0 if t == 0 else 256,
            target=target,
        )
        for target in ("direct", "gateway")
        for t in range(3)
    ]
    decode_times = [20.0 + 0.05 * k for k in range(10)] + [21.0, 21.05, 21.1]
    mix = [
        rec("mixed", "probe-prefill", 0, 18.0, [18.4], prompt=2000),
        rec("mixed", "probe-decode", 0, 18.5, [18.6, 18.65, 18.7]),
        rec("mixed", "decode", 0, 19.9, decode_times),
        rec("mixed", "decode", 1, 19.9, [t + 0.01 for t in decode_times]),
        rec("mixed", "prefill", 0, 20.4, [20.95], prompt=2000),
    ]
    long = [rec("long-context", "long", 0, 30.0, [30.8, 30.9], prompt=3600)]
    return chat + agent + mix + long


def summary():
    rs = records()

    def pick(name):
        return [r for r in rs if r.workload == name]

    def section(name, mod, counters=None):
        out = {
            "requests": len(pick(name)),
            "errors": 0,
            "duration_s": 1.0,
            "summary": mod.summarize(pick(name)),
        }
        if counters:
            out["counters"] = counters
            out["checks"] = {"prompt_tokens": {"client": 10, "vllm": 10.0, "match": True}}
        return out

    counters = {
        "prompt_tokens": 10.0,
        "generation_tokens": 5.0,
        "cached_prompt_tokens": 256.0,
        "prefix_cache_hit_rate": 0.5,
        "preemptions": 0.0,
        "spec_decode_drafts": 0.0,
        "spec_decode_acceptance_rate": None,
        "spec_decode_mean_acceptance_length": None,
    }
    return {
        "started_at": "2026-01-01T00:00:00+00:00",
        "label": None,
        "options": {
            "url": "http://x",
            "gateway_url": "http://g",
            "model": "tiny",
            "workloads": ["short-chat", "agent-loop", "mixed", "long-context"],
            "scale": "tiny",
            "seed": 0,
        },
        "conditions": {
            "server_state": "warm",
            "vllm_version": "0.32.0",
            "mtp_k": 0,
            "sources": {"server_state": "counters", "vllm_version": "server"},
        },
        "workloads": {
            "short-chat": section("short-chat", short_chat, counters),
            "agent-loop": section("agent-loop", agent_loop),
            "mixed": section("mixed", mixed),
            "long-context": section("long-context", long_context),
        },
    }
