"""Weight bytes per component on one rank, and where each figure came from: the
checkpoint's safetensors headers when the model directory has them (exact), else the
parameter count × the weight format (profiles, config-only directories)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from budget import mxfp4
from budget.checkpoint import (
    DRAFT_VOCAB,
    MTP,
    VISION,
    CheckpointWeights,
    checkpoint_weights,
    per_rank,
)
from budget.model import ModelSpec
from budget.profiles import ModelProfile
from budget.settings import Settings
from budget.weights import FORMAT_BYTES_PER_PARAM, main_model_params, mtp_params, sharded

FROM_HEADERS = "exact: checkpoint headers"
FROM_PARAMS = "exact: parameter count × format"
REPLICATED = ("router", "norms")
# What a parameter-count figure assumes about a format without headers to read.
FORMAT_ASSUMPTIONS = {
    "mxfp4": "MXFP4 = 4-bit E2M1 values + one E8M0 scale byte per 32 = 4.25 bits; as in "
    "gpt-oss's checkpoint, attention, router, expert biases, embeddings and lm_head bf16",
}
TRITON_NOTE = (
    "exact: vLLM's TRITON MXFP4 MoE layout on SM 9.0 (budget/mxfp4.py): swizzled values "
    "and scales with their padding{kept}, biases float32"
)
# Another GPU: vLLM's backend there depends on what is installed (oracle/mxfp4.py).
OTHER_BACKEND_NOTE = (
    "assumed: the checkpoint's layout; on SM {sm} vLLM picks FlashInfer's CUTLASS or "
    "Marlin MXFP4 MoE backend, whose padding and repacking the planner does not model"
)


@dataclass(frozen=True)
class WeightSizes:
    """`weights.<component>` and `mtp_module` bytes per rank, with a note each."""

    bytes: dict[str, int]
    notes: dict[str, str]
    source: dict[str, Any] = field(default_factory=dict)  # for the JSON plan


def _last_stage(sizes: dict[str, int], pp: int) -> dict[str, int]:
    """With PP, the last stage: decoder layers / pp, the lm_head, no embedding."""
    if pp == 1:
        return sizes
    return {
        k: (v if k == "lm_head" else 0 if k == "embeddings" else -(-v // pp))
        for k, v in sizes.items()
    }


def _from_params(m: ModelSpec, s: Settings) -> dict[str, int]:
    out: dict[str, int] = {}
    for comp, count in _last_stage(main_model_params(m), s.pp).items():
        if count:
            fmt = "bf16" if comp in REPLICATED else s.formats[comp]
            out[f"weights.{comp}"] = sharded(
                count, FORMAT_BYTES_PER_PARAM[fmt], s.tp, replicated=comp in REPLICATED
            )
    return out


def _params_note(fmt: str | None) -> str:
    assumption = FORMAT_ASSUMPTIONS.get(fmt or "")
    return f"{FROM_PARAMS} ({assumption})" if assumption else FROM_PARAMS


def _mtp_from_params(profile: ModelProfile, s: Settings) -> tuple[int, str]:
    if "mtp_bytes" in profile.weights:
        mtp = -(-int(profile.weights["mtp_bytes"]) // s.tp)
        return mtp, "the articles' figure (profile weights.mtp_bytes)"
    fmt = s.formats["mtp"]
    mtp = sharded(mtp_params(profile.spec), FORMAT_BYTES_PER_PARAM[fmt], s.tp)
    return mtp, f"estimate: MTP parameter count × {fmt}"


def _params_sizes(profile: ModelProfile, s: Settings) -> WeightSizes:
    sizes = _from_params(profile.spec, s)
    notes = {name: _params_note(s.formats.get(name.removeprefix("weights."))) for name in sizes}
    if s.mtp and s.draft_method == "mtp":
        sizes["mtp_module"], notes["mtp_module"] = _mtp_from_params(profile, s)
    return WeightSizes(sizes, notes, {"kind": "parameter count × format"})


def _source(ck: CheckpointWeights) -> dict[str, Any]:
    return {
        "kind": "checkpoint headers",
        "files": list(ck.files),
        "tensor_bytes_on_disk": ck.tensor_bytes_on_disk,
        "quantization": ck.quantization,
        "tensors": dict(ck.tensors_by_component),
    }


def _skipped(m: ModelSpec) -> tuple[str, ...]:
    """Towers vLLM does not load: --language-model-only skips every modality's."""
    return (VISION,) if m.language_model_only else ()


def _checkpoint_sizes(profile: ModelProfile, s: Settings) -> WeightSizes:
    assert profile.checkpoint is not None
    m = profile.spec
    ck = checkpoint_weights(
        profile.checkpoint,
        quantization=m.quantization,
        model_dtype_bytes=m.dtype_bytes,
        tied_embeddings=m.tie_word_embeddings,
    )
    sizes = {
        f"weights.{comp}": per_rank(comp, total, s.tp)
        for comp, total in _last_stage(ck.without(MTP, DRAFT_VOCAB, *_skipped(m)), s.pp).items()
        if total
    }
    notes = {
        name: f"{FROM_HEADERS} ({ck.tensors_by_component[name.removeprefix('weights.')]} tensors)"
        for name in sizes
    }
    mtp_total = ck.bytes_by_component.get(MTP, 0)
    if s.mtp and s.draft_method == "mtp":
        if mtp_total:
            sizes["mtp_module"] = per_rank(MTP, mtp_total, s.tp)
            notes["mtp_module"] = f"{FROM_HEADERS} ({ck.tensors_by_component[MTP]} mtp.* tensors)"
        else:
            sizes["mtp_module"], notes["mtp_module"] = _mtp_from_params(profile, s)
    draft_total = ck.bytes_by_component.get(DRAFT_VOCAB, 0)
    if s.draft_vocab_rows and draft_total:
        sizes["draft_vocab_slice"] = per_rank(DRAFT_VOCAB, draft_total, s.tp)
        notes["draft_vocab_slice"] = f"{FROM_HEADERS} (the drafter's reduced head and map)"
    return WeightSizes(sizes, notes, _source(ck))


def _drafter_sizes(s: Settings) -> tuple[int, str, dict[str, Any]]:
    """An EAGLE / DFlash / draft model's weights: its headers, else its parameters × bf16
    (EAGLE-type drafters share the target's embedding when they have none of their own)."""
    assert s.draft is not None
    d = s.draft
    if d.checkpoint is not None:
        ck = checkpoint_weights(
            d.checkpoint,
            quantization=d.spec.quantization,
            model_dtype_bytes=d.spec.dtype_bytes,
            tied_embeddings=d.spec.tie_word_embeddings,
        )
        total = sum(per_rank(c, b, s.tp) for c, b in ck.bytes_by_component.items())
        count = sum(ck.tensors_by_component.values())
        note = f"{FROM_HEADERS} of the drafter ({count} tensors in {d.model_dir})"
        return total, note, _source(ck)
    params = main_model_params(d.spec)
    if s.draft_method != "draft_model":
        params["embeddings"] = 0
    total = sharded(sum(params.values()), d.spec.dtype_bytes, s.tp)
    note = f"estimate: drafter parameter count × {d.spec.dtype_bytes} B (no safetensors)"
    return total, note, {"kind": "parameter count × format"}


def weight_sizes(profile: ModelProfile, s: Settings) -> WeightSizes:
    """Per rank; with PP the last stage (decoder layers / pp + lm_head + MTP), the largest."""
    if profile.checkpoint is not None:
        sizes = _checkpoint_sizes(profile, s)
    else:
        sizes = _params_sizes(profile, s)
    sizes = _mxfp4_experts(profile.spec, s, sizes, from_params=profile.checkpoint is None)
    if s.draft is None:
        return sizes
    draft_bytes, note, source = _drafter_sizes(s)
    return WeightSizes(
        {**sizes.bytes, "draft_model": draft_bytes},
        {**sizes.notes, "draft_model": note},
        {**sizes.source, "drafter": source},
    )


def _mxfp4_experts(m: ModelSpec, s: Settings, sizes: WeightSizes, from_params: bool) -> WeightSizes:
    """gpt-oss's experts as vLLM repacks them on SM 9.0 (TRITON); elsewhere as stored,
    with the assumption named."""
    key = "weights.routed_experts"
    if m.architecture != mxfp4.GPT_OSS or m.quantization != "mxfp4" or key not in sizes.bytes:
        return sizes
    bytes_, notes = dict(sizes.bytes), dict(sizes.notes)
    if not mxfp4.applies(m, s.device, s.hardware.sm):
        if s.device == "cuda":
            notes[key] += "; " + OTHER_BACKEND_NOTE.format(sm=s.hardware.sm or "unknown")
        return WeightSizes(bytes_, notes, sizes.source)
    bytes_[key] = mxfp4.resident_bytes(m, s.tp, s.pp, s.vllm.version)
    layout = mxfp4.triton_layout(s.vllm.version)
    kept = ", the loaded scales kept beside them" if layout.keeps_loaded_scales else ""
    notes[key] = TRITON_NOTE.format(kept=kept)
    if from_params:  # the parameter count put the experts' bf16 biases with the router
        bytes_["weights.router"] -= mxfp4.bf16_expert_bias_bytes(m, s.pp)
    return WeightSizes(bytes_, notes, sizes.source)
