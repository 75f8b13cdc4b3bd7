"""Seeded, reproducible prompt text (plain words: nothing the gateway treats as volatile)."""

from __future__ import annotations

import random

WORDS = (
    "the a of to in is are be on for with as by at from this that it we they system user "
    "assistant tool call function result error file line code test run model token cache "
    "prefix memory budget serve request response name type string number object array value "
    "key please answer question help read write list find search open close build check "
    "module class method return import config option flag default value path branch commit "
    "merge review patch diff change update remove add fix bug issue log trace stack frame "
    "queue batch step chunk stream decode prefill latency throughput server client worker"
).split()


def words(rng: random.Random, count: int) -> str:
    """`count` words drawn from WORDS, with a full stop every dozen or so."""
    out: list[str] = []
    for i in range(count):
        out.append(rng.choice(WORDS))
        if i % 12 == 11:
            out[-1] += "."
    return " ".join(out)


def rng_for(seed: int, *parts: object) -> random.Random:
    """An independent generator for one piece of one workload (stable across runs)."""
    return random.Random(f"{seed}:" + ":".join(str(p) for p in parts))
