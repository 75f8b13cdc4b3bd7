"""Sweeps in the tuning article's order, one vLLM restart per setting, resumable.

(1) MTP K with everything else fixed → tokens/s, acceptance; (2) for each K the
(1+K)×S graph coverage; (3) prefill chunk → TTFT, prefill tok/s, KV pool, decode
gap; (4) mixed traffic p95/p99 (run with the chunk stage); (5) max seqs last.
A later stage runs with the earlier stages' chosen values.  `sweep_state.json` in
the sweep directory records every finished setting; a rerun skips them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchError

STATE_FILE = "sweep_state.json"
STATE_VERSION = 1
PREFILL_TOLERANCE = 0.9  # chunk choice: lowest decode p95 within 90 % of the best prefill tok/s


@dataclass(frozen=True)
class Stage:
    param: str
    env: str
    workloads: tuple[str, ...]
    step: str


STAGES: dict[str, Stage] = {
    s.param: s
    for s in (
        Stage("mtp", "SPARKSERVE_MTP", ("short-chat",), "(1) MTP K, then (2) graph coverage"),
        Stage(
            "chunk",
            "SPARKSERVE_MAX_NUM_BATCHED_TOKENS",
            ("long-context", "mixed"),
            "(3) prefill chunk and (4) mixed traffic",
        ),
        Stage(
            "max-seqs", "SPARKSERVE_MAX_NUM_SEQS", ("short-chat", "long-context"), "(5) max seqs"
        ),
    )
}
ORDER = tuple(STAGES)


def ordered(params: Sequence[tuple[str, Sequence[int]]]) -> list[tuple[Stage, list[int]]]:
    """Validate the swept parameters and put them in the tuning article's order."""
    seen = set()
    for param, values in params:
        if param not in STAGES:
            raise BenchError(f"param={param!r}; allowed: {', '.join(ORDER)}")
        if param in seen:
            raise BenchError(f"param={param!r} given twice")
        if not values:
            raise BenchError(f"param={param!r} has no values")
        seen.add(param)
    return sorted(
        ((STAGES[p], list(v)) for p, v in params), key=lambda sv: ORDER.index(sv[0].param)
    )


def setting_key(param: str, value: int) -> str:
    return f"{param}={value}"


def metrics_row(value: int, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers of one setting that the sweep compares and plots."""
    w = summary.get("workloads", {})
    row: dict[str, Any] = {"value": value}
    chat = w.get("short-chat", {}).get("summary")
    if chat:
        row["output_tok_s"] = chat["best_output_tok_s"]
        top = list(chat["levels"].values())[-1]
        row["ttft_p50_ms"] = _ms(top["ttft_s"], "p50")
        row["ttft_p95_ms"] = _ms(top["ttft_s"], "p95")
        row["itl_p95_ms"] = _ms(top["itl_s"], "p95")
    long = w.get("long-context", {}).get("summary")
    if long and long.get("prefill_tok_s"):
        row["prefill_tok_s"] = long["prefill_tok_s"]["p50"]
        row["long_ttft_ms"] = _ms(long["ttft_s"], "p50")
    mix = w.get("mixed", {}).get("summary")
    if mix and mix.get("gap_during_prefill_s"):
        row["gap_p95_ms"] = _ms(mix["gap_during_prefill_s"], "p95")
        row["gap_p99_ms"] = _ms(mix["gap_during_prefill_s"], "p99")
    counters = [s.get("counters") for s in w.values() if s.get("counters")]
    if counters:
        row["acceptance_rate"] = counters[0].get("spec_decode_acceptance_rate")
        row["mean_acceptance_length"] = counters[0].get("spec_decode_mean_acceptance_length")
        row["preemptions"] = sum(c.get("preemptions", 0) for c in counters)
    return row


def _ms(d: Mapping[str, Any] | None, key: str) -> float | None:
    return None if not d else 1000.0 * float(d[key])


def choose(param: str, rows: Sequence[Mapping[str, Any]]) -> int | None:
    """The value later stages keep: best tok/s (mtp, max-seqs); for chunk the lowest decode
    p95 gap among settings within PREFILL_TOLERANCE of the best prefill tok/s."""
    if not rows:
        return None
    if param != "chunk":
        return int(max(rows, key=lambda r: r.get("output_tok_s") or 0.0)["value"])
    best = max((r.get("prefill_tok_s") or 0.0) for r in rows)
    fast = [r for r in rows if (r.get("prefill_tok_s") or 0.0) >= PREFILL_TOLERANCE * best]
    return int(min(fast, key=lambda r: r.get("gap_p95_ms") or float("inf"))["value"])


class SweepState:
    """The sweep directory's state file: the sweep's identity and each finished setting."""

    def __init__(self, path: Path, identity: Mapping[str, Any]) -> None:
        self.path = path
        self.identity = dict(identity)
        self.settings: dict[str, dict[str, Any]] = {}
        if path.exists():
            self._load()

    def _load(self) -> None:
        data = json.loads(self.path.read_text(encoding="utf-8"))
        if data.get("identity") != self.identity:
            raise BenchError(
                f"{self.path} holds a different sweep ({data.get('identity')}); "
                "use another --out directory"
            )
        self.settings = dict(data.get("settings", {}))

    def done(self, key: str, retry_failed: bool) -> bool:
        entry = self.settings.get(key)
        if entry is None:
            return False
        return entry["status"] == "ok" or not retry_failed

    def record(self, key: str, entry: Mapping[str, Any]) -> None:
        self.settings[key] = dict(entry)
        data = {"version": STATE_VERSION, "identity": self.identity, "settings": self.settings}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.path)


RunSetting = Callable[[Stage, int, Mapping[str, int], Path], dict[str, Any]]


def run_sweep(
    out: Path,
    params: Sequence[tuple[str, Sequence[int]]],
    identity: Mapping[str, Any],
    run_setting: RunSetting,
    retry_failed: bool = False,
) -> dict[str, Any]:
    """Run every (stage, value) not yet done; `run_setting(stage, value, fixed, dir)` returns
    the setting's state entry ({"status": "ok", "row": …} or {"status": "failed", …})."""
    out.mkdir(parents=True, exist_ok=True)
    state = SweepState(out / STATE_FILE, identity)
    fixed: dict[str, int] = {}
    stages = []
    for stage, values in ordered(params):
        for value in values:
            key = setting_key(stage.param, value)
            if state.done(key, retry_failed):
                continue
            entry = run_setting(stage, value, dict(fixed), out / key)
            state.record(key, {**entry, "fixed": dict(fixed)})
        rows = [
            state.settings[setting_key(stage.param, v)]["row"]
            for v in values
            if state.settings.get(setting_key(stage.param, v), {}).get("status") == "ok"
        ]
        chosen = choose(stage.param, rows)
        if chosen is not None:
            fixed[stage.param] = chosen
        stages.append(
            {
                "param": stage.param,
                "step": stage.step,
                "rows": rows,
                "chosen": chosen,
                "failed": {
                    k: v.get("error")
                    for k, v in state.settings.items()
                    if k.startswith(stage.param + "=") and v["status"] != "ok"
                },
            }
        )
    return {"identity": dict(identity), "stages": stages}
