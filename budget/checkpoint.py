"""Weight bytes per component from a checkpoint's tensor headers (pure arithmetic).

Each tensor is put in one component by its name (the Llama/Qwen/Mixtral/DeepSeek
spellings vLLM's loaders read), and its bytes are what the file holds: quantized
layouts (FP8 + scales, NVFP4 + block scales, AWQ/GPTQ/AutoRound int4 + scales and
zero points) are exact that way.  An unquantized checkpoint stored in another float
type is cast by vLLM to the model dtype, so its bytes are numel × that dtype.
The headers are read by `budget.safetensors_headers`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from budget.safetensors_headers import CheckpointHeaders, TensorHeader

MTP = "mtp"
# The MTP drafter's reduced head and its map (python -m draftvocab; draftvocab/checkpoint.py).
DRAFT_VOCAB = "draft_vocab"
VISION = "vision"
OTHER = "other"
# Float dtypes vLLM casts to the model dtype when the checkpoint is not quantized.
CAST_FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
# Buffers some checkpoints carry that vLLM's loaders skip (llama.py load_weights).
SKIPPED = re.compile(r"rotary_emb\.(inv_freq|cos_cached|sin_cached)$")
# (pattern, component), first match wins.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), component)
    for pattern, component in (
        (r"(^|\.)mtp\.draft_lm_head\.", DRAFT_VOCAB),
        (r"(^|\.)mtp\.", MTP),
        (
            r"(^|\.)(visual|vision_tower|vision_model|audio_tower|multi_modal_projector"
            r"|embed_vision|embed_audio)\.",
            VISION,
        ),
        (r"(^|\.)(embed_tokens|wte|word_embeddings)\.", "embeddings"),
        (r"^backbone\.embeddings\.", "embeddings"),  # Nemotron-H
        (r"(^|\.)lm_head\.", "lm_head"),
        (r"\.linear_attn\.", "gdn"),
        # Mamba-2 mixers: Granite-4.0-H / Falcon-H1 `.mamba.`; Nemotron-H's `.mixer.`
        # holds whichever block the layer is, so its Mamba-2 tensors go by name.
        (r"\.mamba\.", "mamba"),
        (r"\.mixer\.(in_proj|conv1d|out_proj|A_log|A|D|dt_bias|norm)(\.|$)", "mamba"),
        (r"\.mixer\.[qkvo]_proj\.", "attention"),
        (r"\.block_sparse_moe\.(input|output)_linear\.", "routed_experts"),  # Granite
        (r"\.block_sparse_moe\.router\.", "router"),
        (r"\.shared_mlp\.", "shared_experts"),
        (r"\.experts\.", "routed_experts"),
        (r"\.mlp\.router\.", "router"),  # gpt-oss
        (r"\.shared_experts?_gate\.", "router"),
        (r"\.shared_experts?\.", "shared_experts"),
        (r"\.gate\.", "router"),
        (r"norm[^.]*\.(weight|bias)$", "norms"),
        (r"\.(self_attn|attn|attention)\.", "attention"),
        (r"\.(mlp|feed_forward|block_sparse_moe)\.", "dense_mlp"),
        (r"\.mixer\.(up_proj|down_proj)\.", "dense_mlp"),  # Nemotron-H's "-" blocks
    )
)
REPLICATED = ("router", "norms")  # whole on every tensor-parallel rank


def component_of(tensor_name: str) -> str:
    """The component a tensor belongs to; `other` when no rule knows its name."""
    for pattern, component in _RULES:
        if pattern.search(tensor_name):
            return component
    return OTHER


@dataclass(frozen=True)
class CheckpointWeights:
    """Resident bytes per component (whole model, unsharded) and where they came from."""

    bytes_by_component: dict[str, int]
    tensors_by_component: dict[str, int]
    files: tuple[str, ...]
    tensor_bytes_on_disk: int  # the tensors' data as stored (headers excluded)
    quantization: str | None

    def without(self, *components: str) -> dict[str, int]:
        return {k: v for k, v in self.bytes_by_component.items() if k not in components}


def resident_bytes(tensor: TensorHeader, quantized: bool, model_dtype_bytes: int) -> int:
    """What vLLM holds for this tensor: as stored, or cast when nothing is quantized."""
    if not quantized and tensor.dtype in CAST_FLOAT_DTYPES:
        return tensor.numel * model_dtype_bytes
    return tensor.data_bytes


def _kept(tensors: Iterable[TensorHeader], tied_embeddings: bool) -> list[TensorHeader]:
    """Tensors vLLM loads: no rotary buffers; no lm_head when it is the embedding's."""
    return [
        t
        for t in tensors
        if not SKIPPED.search(t.name)
        and not (tied_embeddings and component_of(t.name) == "lm_head")
    ]


def checkpoint_weights(
    headers: CheckpointHeaders,
    *,
    quantization: str | None,
    model_dtype_bytes: int,
    tied_embeddings: bool,
) -> CheckpointWeights:
    """Sum the headers per component (`mtp` holds the MTP module's own tensors)."""
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    for tensor in _kept(headers.tensors, tied_embeddings):
        component = component_of(tensor.name)
        size = resident_bytes(tensor, quantization is not None, model_dtype_bytes)
        sizes[component] = sizes.get(component, 0) + size
        counts[component] = counts.get(component, 0) + 1
    return CheckpointWeights(
        bytes_by_component=sizes,
        tensors_by_component=counts,
        files=headers.files,
        tensor_bytes_on_disk=headers.tensor_bytes,
        quantization=quantization,
    )


def per_rank(component: str, total_bytes: int, tp: int) -> int:
    """One rank's share: column/row-parallel tensors split by TP, routers and norms whole."""
    return total_bytes if component in REPLICATED else -(-total_bytes // tp)
