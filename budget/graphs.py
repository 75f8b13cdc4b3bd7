"""CUDA-graph capture sizes (vLLM's rules) and an estimate of the graph pool."""

from __future__ import annotations

from dataclasses import dataclass

from budget.errors import BudgetError

MiB = 1024**2
# vllm/config/vllm.py `_set_cudagraph_sizes`: default ceiling of captured tokens.
DEFAULT_MAX_GRAPH_SIZE = 512
DEFAULT_MAX_GRAPH_SIZE_SM100 = 1024
# Per captured graph, fitted to the H200 runs (docs/gpu-calibration.md).
FULL_GRAPH_BYTES = 20 * MiB
PIECEWISE_GRAPH_BYTES = 5 * MiB


def seeds_capture_sizes(mtp_k: int, max_num_seqs: int) -> tuple[int, ...]:
    """The tuning article's list: every uniform decode width (K+1)×S for S = 1..max_num_seqs."""
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


def spec_decode_capture_sizes(capture_sizes: tuple[int, ...], mtp_k: int) -> tuple[int, ...]:
    """The sizes vLLM captures when speculating: each rounded up to a multiple of K+1,
    those past the largest given size dropped (config/compilation.py
    `adjust_cudagraph_sizes_for_spec_decode`, 0.24 and 0.32)."""
    query_len = mtp_k + 1
    if not capture_sizes or query_len <= 1:
        return capture_sizes
    largest = max(capture_sizes)
    rounded = sorted({-(-s // query_len) * query_len for s in capture_sizes})
    kept = tuple(s for s in rounded if s <= largest)
    return kept or ((query_len,) if query_len <= largest else ())


@dataclass(frozen=True)
class WidthDispatch:
    """How vLLM runs a uniform decode step of `width` = (K+1)×S tokens."""

    width: int
    mode: str  # FULL, PIECEWISE or NONE (eager)
    padded_to: int  # the captured size it replays (= width when one equals it, or eager)


def decode_dispatch(
    graph_mode: str, capture_sizes: tuple[int, ...], mtp_k: int, max_num_seqs: int
) -> list[WidthDispatch]:
    """Each uniform decode width as vLLM 0.24-0.32's dispatcher runs it
    (v1/cudagraph_dispatcher.py `dispatch`): a width above the largest captured size runs
    eagerly; any other is padded up to the next captured size and replays that size's
    graph. A FULL decode graph exists for the sizes from K+1 to (K+1)×max_num_seqs
    (`initialize_cudagraph_keys`); a padded size past that gets FULL_AND_PIECEWISE's
    piecewise graph, or none with FULL_DECODE_ONLY; FULL captures every size alike."""
    sizes = spec_decode_capture_sizes(capture_sizes, mtp_k)
    query_len = mtp_k + 1
    out = []
    for width in seeds_capture_sizes(mtp_k, max_num_seqs):
        padded = next((s for s in sizes if s >= width), None)
        if graph_mode in ("NONE", "PIECEWISE") or padded is None:
            mode = "PIECEWISE" if graph_mode == "PIECEWISE" and padded else "NONE"
        elif graph_mode == "FULL" or padded <= query_len * max_num_seqs:
            mode = "FULL"
        else:
            mode = "PIECEWISE" if graph_mode == "FULL_AND_PIECEWISE" else "NONE"
        out.append(WidthDispatch(width, mode, padded if padded and mode != "NONE" else width))
    return out


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
