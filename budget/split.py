"""Multi-node plans: compare every TP × PP split that uses all GPUs, pick one, say why."""

from __future__ import annotations

from dataclasses import replace

from budget.kv import tp_heads
from budget.plan import Plan, kv_model, plan_for
from budget.profiles import ModelProfile
from budget.settings import Settings


def _splits(profile: ModelProfile, s: Settings) -> list[tuple[int, int]]:
    """(tp, pp) using every GPU, TP splitting every head as vLLM needs (budget/kv_tp.py)."""
    ranks = s.nodes * s.hardware.gpus
    m = profile.spec
    heads = tp_heads(kv_model(m, 0))
    return [
        (ranks // pp, pp)
        for pp in range(1, ranks + 1)
        if ranks % pp == 0 and heads.refusal(ranks // pp) is None and m.num_layers >= pp
    ]


def choose_split(profile: ModelProfile, s: Settings, acceptance: float) -> Plan:
    """The split that fits with the fastest decode estimate (else the most headroom)."""
    plans = [
        plan_for(profile, replace(s, tp=tp, pp=pp), acceptance) for tp, pp in _splits(profile, s)
    ]
    fitting = [p for p in plans if p.fits]
    if fitting:
        best = max(fitting, key=lambda p: p.speed.decode_tokens_per_s)
        why = "fits with the fastest decode estimate"
    else:
        best = max(plans, key=lambda p: p.headroom_bytes)
        why = "no split fits; this one comes closest"
    best.parallelism = [
        f"chose TP {best.settings.tp} × PP {best.settings.pp} over {s.nodes} nodes: {why}"
    ]
    best.parallelism += [
        f"TP {p.settings.tp} × PP {p.settings.pp}: {'fits' if p.fits else 'does not fit'}, "
        f"headroom {p.headroom_bytes / 1024**3:.2f} GiB, decode ≈ "
        f"{p.speed.decode_tokens_per_s:.1f} tok/s, {p.kv_cache_tokens:,} KV tokens"
        for p in plans
    ]
    return best
