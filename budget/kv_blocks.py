"""Block sizes, KV dtypes and layer grouping of vLLM's KV pool.

Grouping mirrors vllm 0.32 `v1/core/kv_cache_utils.py`
`_get_kv_cache_groups_uniform_page_size` (0.33: `v1/core/kv_cache_planning.py`,
same rule). A bucket is the layers of one spec (full attention incl. MTP; GDN);
all pages are already unified when grouping runs.
"""

from __future__ import annotations

DEVICES = ("cuda", "cpu")
# platforms/cpu.py check_and_update_config: block_size = 128 unless --block-size.
CPU_DEFAULT_BLOCK_SIZE = 128
# config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE (kept by FlashAttention/FlashInfer/Triton).
CUDA_DEFAULT_BLOCK_SIZE = 16
# v1/attention/backends/cpu_attn.py get_supported_kernel_block_sizes: [MultipleOf(32)].
CPU_KERNEL_BLOCK_SIZE = 32
# v1/attention/backends/flash_attn.py, triton_attn.py: [MultipleOf(16)];
# flashinfer.py: [16, 32, 64] (smallest 16).
CUDA_KERNEL_BLOCK_SIZE = 16
# utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE, element sizes; "auto" = model dtype.
KV_DTYPE_BYTES = {
    "bfloat16": 2,
    "half": 2,
    "float16": 2,
    "float": 4,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}


# kv_cache_utils.py _get_kv_cache_groups_uniform_page_size: use the larger bucket
# as the group size when it is < 1.5x the smaller one (fewer padding layers).
GROUP_SIZE_MAX_RATIO = 1.5


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per KV element: `--kv-cache-dtype`, "auto" = the model dtype."""
    if kv_cache_dtype == "auto":
        return model_dtype_bytes
    return KV_DTYPE_BYTES[kv_cache_dtype]


def start_block_size(device: str, user_block_size: int | None) -> int:
    """Block size before hybrid raising: --block-size, else the device default."""
    if user_block_size is not None:
        return user_block_size
    return CPU_DEFAULT_BLOCK_SIZE if device == "cpu" else CUDA_DEFAULT_BLOCK_SIZE


def kernel_block_size(device: str, override: int | None) -> int:
    """Smallest kernel block of the attention backend (hybrid alignment unit)."""
    if override is not None:
        return override
    return CPU_KERNEL_BLOCK_SIZE if device == "cpu" else CUDA_KERNEL_BLOCK_SIZE


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def group_layers(bucket_sizes: tuple[int, ...]) -> tuple[int, tuple[int, ...], int]:
    """`_get_kv_cache_groups_uniform_page_size`: (group_size, groups per bucket, padding).

    One bucket (all layers one spec) is one group of every layer (uniform spec).
    """
    if len(bucket_sizes) == 1:
        return bucket_sizes[0], (1,), 0
    group_size = min(bucket_sizes)
    if max(bucket_sizes) < group_size * GROUP_SIZE_MAX_RATIO:
        group_size = max(bucket_sizes)
    groups = tuple(_cdiv(n, group_size) for n in bucket_sizes)
    padding = sum((group_size - n % group_size) % group_size for n in bucket_sizes)
    return group_size, groups, padding


def largest_group_layers(bucket_sizes: tuple[int, ...], groups: tuple[int, ...]) -> int:
    """Layers in the fullest group: layers[i::num_groups] puts cdiv(n, g) in the first."""
    return max(_cdiv(n, g) for n, g in zip(bucket_sizes, groups, strict=True))


def padding_log_lines(bucket_sizes: tuple[int, ...], group_size: int) -> tuple[str, ...]:
    """The warning `_get_kv_cache_groups_uniform_page_size` logs per padded bucket."""
    lines = []
    for layers in bucket_sizes:
        padding = group_size - layers % group_size
        if padding != group_size:
            lines.append(
                f"Add {padding} padding layers, may waste at most "
                f"{padding / layers * 100:.2f}% KV cache memory"
            )
    return tuple(lines)
