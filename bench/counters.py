"""vLLM's own counters: parse Prometheus text, subtract two scrapes, derive rates.

A `Snapshot` maps each vLLM series `name{label="v",…}` (labels `model_name` and `engine` folded
away, i.e. summed over engines) to the value of every counter sample and every
histogram `_sum`/`_count`.  Deltas over a run are what the report shows next to
the client-side numbers (docs/kv-arithmetic.md Metrics).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

VLLM_PREFIX = "vllm:"
FOLDED_LABELS = frozenset({"model_name", "engine"})
COUNTER_SUFFIXES = ("_total", "_sum", "_count")
INFO_METRIC = "vllm:cache_config_info"

PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
CACHED_TOKENS = "vllm:prompt_tokens_cached_total"
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
REQUEST_SUCCESS = "vllm:request_success_total"
BY_SOURCE = "vllm:prompt_tokens_by_source_total"


def sample_key(name: str, labels: Mapping[str, str]) -> str:
    kept = sorted((k, v) for k, v in labels.items() if k not in FOLDED_LABELS)
    if not kept:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in kept) + "}"


@dataclass(frozen=True)
class Snapshot:
    """One scrape: counter-like samples by key, and the info labels vLLM exports."""

    values: Mapping[str, float]
    info: Mapping[str, str]

    def get(self, key: str) -> float:
        return self.values.get(key, 0.0)

    def total(self, name: str) -> float:
        """Sum of every labelled sample of `name` (e.g. all `source=` series)."""
        return sum(v for k, v in self.values.items() if k == name or k.startswith(name + "{"))

    def has_vllm(self) -> bool:
        return bool(self.values)


def parse_metrics(text: str) -> Snapshot:
    """Parse Prometheus exposition text into a Snapshot."""
    values: dict[str, float] = {}
    info: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.name == INFO_METRIC or sample.name == INFO_METRIC:
                info.update({k: v for k, v in sample.labels.items() if k not in FOLDED_LABELS})
                continue
            # Only vLLM's own series: process_* counters move on every scrape.
            if not sample.name.startswith(VLLM_PREFIX) or not sample.name.endswith(
                COUNTER_SUFFIXES
            ):
                continue
            key = sample_key(sample.name, sample.labels)
            values[key] = values.get(key, 0.0) + float(sample.value)
    return Snapshot(values=values, info=info)


def delta(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """after − before for every key of `after` (a key new in `after` counts from 0)."""
    return {
        key: value - before.get(key)
        for key, value in sorted(after.values.items())
        if value - before.get(key) != 0.0
    }


def _by_source(deltas: Mapping[str, float]) -> dict[str, float]:
    prefix = BY_SOURCE + '{source="'
    return {k[len(prefix) : -2]: v for k, v in deltas.items() if k.startswith(prefix)}


def derived(deltas: Mapping[str, float]) -> dict[str, Any]:
    """The numbers the report shows from vLLM's own counters over one interval."""
    drafts = deltas.get(SPEC_DRAFTS, 0.0)
    draft_tokens = deltas.get(SPEC_DRAFT_TOKENS, 0.0)
    accepted = deltas.get(SPEC_ACCEPTED, 0.0)
    queries = deltas.get(PREFIX_QUERIES, 0.0)
    return {
        "prompt_tokens": deltas.get(PROMPT_TOKENS, 0.0),
        "generation_tokens": deltas.get(GENERATION_TOKENS, 0.0),
        "cached_prompt_tokens": deltas.get(CACHED_TOKENS, 0.0),
        "prompt_tokens_by_source": _by_source(deltas),
        "prefix_cache_hit_rate": deltas.get(PREFIX_HITS, 0.0) / queries if queries else None,
        "preemptions": deltas.get(PREEMPTIONS, 0.0),
        "spec_decode_drafts": drafts,
        "spec_decode_acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "spec_decode_mean_acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "requests_finished": sum(
            v for k, v in deltas.items() if k.startswith(REQUEST_SUCCESS + "{")
        ),
    }


def is_server_cold(snapshot: Snapshot) -> bool:
    """True when vLLM has served no request yet (no prompt tokens counted)."""
    return snapshot.get(PROMPT_TOKENS) == 0.0
