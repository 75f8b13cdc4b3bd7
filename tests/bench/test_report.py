import pytest

from bench.plots import plot_run, plot_sweep
from bench.report import render_run
from bench.rundir import RunDir, iter_records, write_record
from bench.sweep_report import render_sweep
from tests.bench.synthetic import records, summary


def test_report_has_every_section_and_table():
    text = render_run(summary(), ["a.png"])
    for heading in (
        "# Benchmark run",
        "## Conditions",
        "## vLLM counters over each workload",
        "## Short chat",
        "## Agent loop",
        "### gateway",
        "## Mixed traffic",
        "## Long context",
        "![a.png](plots/a.png)",
    ):
        assert heading in text
    assert "| c=2 | 2 | 0 |" in text
    assert "| vllm_version | 0.32.0 | server |" in text
    assert "| short-chat | prompt_tokens | 10 | 10 | ✓ |" in text


def test_report_without_counters_says_they_are_missing():
    s = summary()
    for section in s["workloads"].values():
        section.pop("counters", None)
    assert "No vLLM /metrics were readable" in render_run(s)


def test_plots_are_written_as_png(tmp_path):
    names = plot_run(summary(), records(), tmp_path)
    assert set(names) == {
        "short_chat_latency_throughput.png",
        "mixed_decode_gap_timeline.png",
        "agent_loop_cache_per_turn.png",
    }
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_records_round_trip_through_json_lines(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    with run_dir.open_records() as stream:
        for record in records():
            write_record(stream, record)
    back = list(iter_records(run_dir.records_path))
    assert [(r.group, r.index) for r in back] == [(r.group, r.index) for r in records()]
    for got, sent in zip(back, records(), strict=True):
        assert got.chunk_times_s == pytest.approx(sent.chunk_times_s, abs=1e-6)


def test_sweep_report_lists_stages_in_order_with_choice_and_failures(tmp_path):
    rows = [
        {"value": 0, "output_tok_s": 10.0, "ttft_p50_ms": 5.0, "graph_fallback_widths": [1]},
        {"value": 1, "output_tok_s": 12.0, "ttft_p50_ms": 6.0, "graph_fallback_widths": []},
    ]
    result = {
        "identity": {"params": [["mtp", [0, 1]]]},
        "stages": [
            {
                "param": "mtp",
                "step": "(1) MTP K",
                "rows": rows,
                "chosen": 1,
                "failed": {"mtp=2": "launcher exited 3 before ready"},
            }
        ],
    }
    plots = {"mtp": plot_sweep(rows, "mtp", tmp_path)}
    text = render_sweep(result, plots)
    assert "| mtp | output tok/s | TTFT p50 ms | (1+K)×S widths without a full graph |" in text
    assert "| 1 | 12.0 | 6.0 | – |" in text
    assert "Chosen for later stages: **mtp=1**" in text
    assert "`mtp=2` failed: launcher exited 3 before ready" in text
    assert (tmp_path / "sweep_mtp.png").exists()
