"""CUDA-graph capture sizes (vLLM's rules) and an estimate of the graph pool."""

from __future__ import annotations

from budget.errors import BudgetError

MiB = 1024**2
# vllm/config/vllm.py `_set_cudagraph_sizes`: default ceiling of captured tokens.
DEFAULT_MAX_GRAPH_SIZE = 512
DEFAULT_MAX_GRAPH_SIZE_SM100 = 1024
# Per captured graph, fitted to the H200 runs (docs/gpu-calibration.md).
FULL_GRAPH_BYTES = 20 * MiB
PIECEWISE_GRAPH_BYTES = 5 * MiB


def seeds_capture_sizes(mtp_k: int, max_num_seqs: int) -> tuple[int, ...]:
    """The seeds' list: every uniform decode width (K+1)×S for S = 1..max_num_seqs."""
    return tuple((mtp_k + 1) * s for s in range(1, max_num_seqs + 1))


def _request_counts(max_reqs: int, ceiling: int) -> list[int]:
    max_reqs = min(max_reqs, ceiling)
    counts = [n for n in (1, 2, 4) if n <= max_reqs]
    counts += list(range(8, min(max_reqs + 1, 256), 8))
    counts += list(range(256, max_reqs + 1, 16))
    return sorted({*counts, max_reqs})


def vllm_default_capture_sizes(
    max_num_seqs: int, mtp_k: int, max_num_batched_tokens: int, sm100: bool = False
) -> tuple[int, ...]:
    """vLLM's own default list (vllm/config/vllm.py `_set_cudagraph_sizes`)."""
    ceiling = DEFAULT_MAX_GRAPH_SIZE_SM100 if sm100 else DEFAULT_MAX_GRAPH_SIZE
    query_len = mtp_k + 1
    max_size = min(max_num_seqs * query_len * 2, ceiling)
    uniform: list[int] = []
    if query_len > 1:
        uniform = sorted(
            {
                n * query_len
                for n in _request_counts(max_num_seqs, ceiling)
                if n * query_len <= max_size
            }
        )
    elif max_num_seqs <= max_size:
        uniform = [max_num_seqs]
    max_size = min(max_num_batched_tokens, max_size)
    sizes = [i for i in (1, 2, 4) if i <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    if max_num_batched_tokens <= max_size:
        sizes.append(max_num_batched_tokens)
    sizes += [s for s in uniform if s <= max_num_batched_tokens]
    return tuple(sorted(set(sizes)))


def uncovered_decode_widths(
    capture_sizes: tuple[int, ...], mtp_k: int, max_num_seqs: int
) -> list[int]:
    """Uniform decode widths (K+1)×S that no captured size equals (they fall back)."""
    captured = set(capture_sizes)
    return [w for w in seeds_capture_sizes(mtp_k, max_num_seqs) if w not in captured]


def check_capture_sizes(sizes: tuple[int, ...]) -> tuple[int, ...]:
    if not sizes or any(s < 1 for s in sizes):
        raise BudgetError(f"cudagraph_capture_sizes={list(sizes)}; must be positive integers")
    return tuple(sorted(set(sizes)))


def graph_pool_bytes(
    capture_sizes: tuple[int, ...], mode: str, decode_bytes_per_token: int, num_layers: int
) -> int:
    """Estimate of what vLLM's graph-memory profiling subtracts before sizing KV.

    H200, vLLM 0.24: four FULL graphs were estimated at 0.06–0.10 GiB and took
    0.06–0.11 GiB; with FULL_AND_PIECEWISE the piecewise graphs add a little per
    size.  Graphs share one pool, so only the largest graph's activations count.
    """
    if mode == "NONE" or not capture_sizes:
        return 0
    full = len(capture_sizes) if mode.startswith("FULL") else 0
    piecewise = len(capture_sizes) if "PIECEWISE" in mode else 0
    largest = max(capture_sizes) * decode_bytes_per_token
    return full * FULL_GRAPH_BYTES + piecewise * PIECEWISE_GRAPH_BYTES + largest
