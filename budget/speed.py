"""Decode / prefill speed ESTIMATE from memory bandwidth and FLOPs (roofline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budget.model import ModelSpec
from budget.weights import active_params_per_token


@dataclass(frozen=True)
class Link:
    """The link the estimate sends activations over."""

    between: str  # "nodes", "gpus" (of one node) or "none" (one rank sends nothing)
    gbs: float
    latency_us: float
    source: str  # "hardware profile" or "--node-link-gbs/--node-link-latency-us"

    def to_dict(self) -> dict[str, float | str]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SpeedEstimate:
    decode_bytes_per_step: int  # weights + KV + state read per decode step (one stream)
    mtp_bytes_per_round: int  # draft passes: MTP module + lm_head (or draft slice) × K
    draft_vocab_saving_bytes: int  # per MTP round, from the reduced draft vocab
    expected_tokens_per_step: float  # 1 + a + a² + … + a^K
    decode_tokens_per_s: float  # one stream
    prefill_tokens_per_s: float
    comm_seconds_per_step: float = 0.0  # TP all-reduces and PP hand-offs on the links
    link: Link | None = None

    def to_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = dict(self.__dict__)
        values["link"] = self.link.to_dict() if self.link else None
        return values


def expected_tokens(acceptance: float, k: int) -> float:
    return sum(acceptance**i for i in range(k + 1))


def estimate_speed(
    m: ModelSpec,
    *,
    weight_bytes_per_param: float,
    kv_bytes_per_token: float,
    context: int,
    bandwidth_gbs: float,
    tflops: float,
    tp: int,
    mtp_k: int,
    mtp_bytes: int,
    draft_rows: int,
    acceptance: float,
    comm_seconds_per_step: float = 0.0,
    link: Link | None = None,
) -> SpeedEstimate:
    active = active_params_per_token(m)
    step = int(active * weight_bytes_per_param / tp + kv_bytes_per_token * context)
    lm_head_bytes = m.vocab_size * m.hidden_size * 2 // tp
    draft_head = draft_rows * m.hidden_size * 2 // tp if draft_rows else lm_head_bytes
    mtp_round = mtp_k * (mtp_bytes + draft_head)
    saving = mtp_k * (lm_head_bytes - draft_head) if draft_rows else 0
    tokens = expected_tokens(acceptance, mtp_k)
    seconds = (step + mtp_round) / (bandwidth_gbs * 1e9) + comm_seconds_per_step
    prefill = tflops * 1e12 * tp / (2 * (active + m.vocab_size * m.hidden_size))
    return SpeedEstimate(
        decode_bytes_per_step=step,
        mtp_bytes_per_round=mtp_round,
        draft_vocab_saving_bytes=saving,
        expected_tokens_per_step=tokens,
        decode_tokens_per_s=tokens / seconds,
        prefill_tokens_per_s=prefill,
        comm_seconds_per_step=comm_seconds_per_step,
        link=link,
    )


def comm_seconds(
    *,
    hidden: int,
    layers: int,
    tokens: int,
    tp: int,
    pp: int,
    link_gbs: float,
    link_latency_us: float,
) -> float:
    """Per decode step: two ring all-reduces per layer with TP, one hand-off per stage
    boundary with PP, each latency + bytes / link bandwidth (bf16 activations)."""
    payload = hidden * 2 * tokens
    latency = link_latency_us * 1e-6
    all_reduce = latency + 2 * (tp - 1) / tp * payload / (link_gbs * 1e9) if tp > 1 else 0.0
    hand_off = latency + payload / (link_gbs * 1e9)
    return 2 * layers * all_reduce + (pp - 1) * hand_off
