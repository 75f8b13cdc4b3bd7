"""Sweep order, choice, resume and the launcher's error path (fake launcher, no vLLM)."""

import json
import sys
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import BenchError, LaunchError
from bench.graphs import coverage, parse_log
from bench.launcher import LaunchedServer, LaunchSpec
from bench.sweep import STATE_FILE, choose, ordered, run_sweep

FAKE = [sys.executable, str(Path(__file__).with_name("fake_launcher.py"))]


def test_stages_run_in_seed_000_order():
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
    assert cov["covered"] == [4, 8, 16] and cov["fallback"] == [12]
    eager = coverage(0, 2, "NONE", None)
    assert eager["fallback"] == [1, 2] and "no full graphs" in eager["note"]
