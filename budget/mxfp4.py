"""What vLLM keeps resident for gpt-oss's MXFP4 experts on the TRITON MoE backend.

vLLM serves `GptOssForCausalLM` with `quant_method: mxfp4` through
layers/quantization/mxfp4.py `GptOssMxfp4MoEMethod`.  On CUDA it picks the MoE backend
in layers/fused_moe/oracle/mxfp4.py `_get_priority_backends_for_gpt_oss`: FlashInfer
TRTLLM needs SM 10.x, AITER is ROCm, and TRITON (`_triton_kernel_moe_supports_current_device`:
9.0 ≤ capability < 11.0 in 0.20-0.31, < 13.0 from 0.32) comes next, so an SM 9.0 GPU
(H100, H200) runs TRITON in every release read (0.20.0-0.34.0).  On other GPUs the
backend depends on what is installed (FlashInfer's CUTLASS MoE, else Marlin), so the
planner keeps the checkpoint's layout there and says so.

`convert_gpt_oss_weight_to_mxfp4_moe_kernel_format` (oracle/mxfp4.py) for TRITON turns
the expert biases to float32 and swizzles values and scales (quantization/utils/
mxfp4_utils.py `_swizzle_mxfp4`) into triton_kernels' Hopper layouts
(third_party/triton_kernels/tensor_details/layout_details/hopper_value.py,
hopper_scale.py), which pad; the releases differ in the padding and in whether the
loaded scales stay registered beside the swizzled ones (`TRITON_LAYOUTS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from budget.model import ModelSpec
from budget.vllm_rules import release_reaches

GPT_OSS = "GptOssForCausalLM"
TRITON_SM = "9.0"  # the SM where every release read picks TRITON for gpt-oss
MXFP4_BLOCK = 32  # values per E8M0 scale (quantization/mxfp4.py create_weights)
FP32_BYTES = 4
BF16_BYTES = 2
# oracle/mxfp4.py `mxfp4_round_up_hidden_size_and_intermediate_size`: the TRITON branch
# (the final `else`) rounds the intermediate size per TP rank up to 64 (0.20.0-0.34.0).
INTERMEDIATE_ALIGN = 64
# hopper_scale.py `HopperMXScaleLayout.swizzle_data`: rows padded to
# SWIZZLE_ALIGN_M = 2 * num_warps * 2 * 8 (num_warps=8 from `_swizzle_mxfp4`), scale
# columns to SWIZZLE_ALIGN_K = 2 (0.20.0-0.34.0).
SCALE_ROW_ALIGN = 2 * 8 * 2 * 8
SCALE_COLUMN_ALIGN = 2


@dataclass(frozen=True)
class TritonLayout:
    """How one range of releases repacks the experts for TRITON on SM 9.0."""

    first: tuple[int, int, int]  # the first release it was read in
    # hopper_value.py `HopperMXValueLayout.swizzle_data`: (rows, packed bytes) padded to
    # these multiples.
    value_align: tuple[int, int]
    # mxfp4_utils.py `_swizzle_mxfp4` on SM 9.0: scale groups padded to this multiple
    # before the swizzle.
    scale_group_align: int
    # oracle/mxfp4.py: whether `w13_weight_scale` / `w2_weight_scale` stay registered
    # after the swizzle (only the values are `del`-ed) or are deleted with them.
    keeps_loaded_scales: bool


# Oldest first.  A release between two read ones gets the older layout (assumed).
TRITON_LAYOUTS: tuple[TritonLayout, ...] = (
    # 0.20.0, 0.20.1: hopper_value.py pre-pads both dims to 64; the scales stay.
    TritonLayout((0, 20, 0), (64, 64), 1, keeps_loaded_scales=True),
    # 0.24.0: the pre-pad is gone; the mma tiles pad rows to 2·4·2 = 16 and packed bytes
    # to 4·2·4 = 32 (k_tile, warp_tile, threads, scott_trick, contig); the scales stay.
    TritonLayout((0, 24, 0), (16, 32), 1, keeps_loaded_scales=True),
    # 0.25.1: `del layer.w13_weight_scale` / `w2_weight_scale` after the swizzle.
    TritonLayout((0, 25, 1), (16, 32), 1, keeps_loaded_scales=False),
    # 0.26.0-0.34.0: "pad K (num scale groups) to 0 mod 4" on SM 9.0 (vllm#47303);
    # 0.34's `store_params_in_triton` keeps the swizzled tensors in the params instead.
    TritonLayout((0, 26, 0), (16, 32), 4, keeps_loaded_scales=False),
)


def _up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def triton_layout(vllm_version: str) -> TritonLayout:
    chosen = TRITON_LAYOUTS[0]
    for layout in TRITON_LAYOUTS:
        if release_reaches(vllm_version, layout.first):
            chosen = layout
    return chosen


def applies(m: ModelSpec, device: str, sm: str) -> bool:
    """gpt-oss's MXFP4 experts on an SM 9.0 GPU: the TRITON backend."""
    return m.architecture == GPT_OSS and m.quantization == "mxfp4" and is_triton_gpu(device, sm)


def is_triton_gpu(device: str, sm: str) -> bool:
    return device == "cuda" and sm == TRITON_SM


def _matrix_bytes(rows: int, columns: int, layout: TritonLayout) -> int:
    """One expert's matrix (rows × columns values): swizzled values and scales, plus the
    loaded scales where they stay."""
    row_align, byte_align = layout.value_align
    values = _up(rows, row_align) * _up(columns // 2, byte_align)
    groups = columns // MXFP4_BLOCK
    swizzled = _up(rows, SCALE_ROW_ALIGN) * _up(_up(groups, layout.scale_group_align), 2)
    loaded = rows * groups if layout.keeps_loaded_scales else 0
    return values + swizzled + loaded


def layer_bytes(hidden: int, intermediate: int, experts: int, layout: TritonLayout) -> int:
    """One MoE layer on one rank (`intermediate` is the rank's, rounded): w13 is
    (2·I × H), w2 (H × I); the biases (2·I and H per expert) in float32."""
    w13 = _matrix_bytes(2 * intermediate, hidden, layout)
    w2 = _matrix_bytes(hidden, intermediate, layout)
    biases = (2 * intermediate + hidden) * FP32_BYTES
    return experts * (w13 + w2 + biases)


def _moe_layers(m: ModelSpec, pp: int) -> int:
    assert m.moe is not None
    moe = m.moe
    count = sum(1 for i in range(m.num_layers) if moe.is_moe_layer(i))
    return -(-count // pp)


def resident_bytes(m: ModelSpec, tp: int, pp: int, vllm_version: str) -> int:
    """The routed experts with their biases on one rank (the last stage with PP)."""
    assert m.moe is not None
    intermediate = _up(m.moe.expert_intermediate_size // tp, INTERMEDIATE_ALIGN)
    per_layer = layer_bytes(
        m.hidden_size, intermediate, m.moe.num_experts, triton_layout(vllm_version)
    )
    return _moe_layers(m, pp) * per_layer


def bf16_expert_bias_bytes(m: ModelSpec, pp: int) -> int:
    """The experts' bf16 biases the parameter count puts with the (replicated) router."""
    assert m.moe is not None
    moe = m.moe
    return (
        _moe_layers(m, pp)
        * moe.num_experts
        * (2 * moe.expert_intermediate_size + m.hidden_size)
        * BF16_BYTES
    )
