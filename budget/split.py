"""Multi-node plans: compare every TP × PP split that uses all GPUs, pick one, say why."""

from __future__ import annotations

from dataclasses import replace

from budget.plan import Plan, plan_for
from budget.profiles import ModelProfile
from budget.settings import Settings


def _splits(profile: ModelProfile, s: Settings) -> list[tuple[int, int]]:
    """(tp, pp) using every GPU, TP dividing the attention and KV heads."""
    ranks = s.nodes * s.hardware.gpus
    m = profile.spec
    return [
        (ranks // pp, pp)
        for pp in range(1, ranks + 1)
        if ranks % pp == 0 and m.num_attention_heads % (ranks // pp) == 0 and m.num_layers >= pp
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
