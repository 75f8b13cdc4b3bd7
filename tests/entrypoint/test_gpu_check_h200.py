"""`python -m entrypoint.gpu_check` on an H200, replayed: two sets of one cold and three or
four warm starts of the Qwen3-Next-shaped hybrid (24 layers, vLLM 0.24.0, MTP 3, the
source articles' graph settings), a baseline start of the entrypoint before the flag
verdict was cached, a start with CUDA_MODULE_LOADING=EAGER
(fixtures/gpu_h200_check/README.md), and the harness's mixed workload against the
planner's flags and vLLM's defaults (fixtures/gpu_h200_first_request/README.md).  The
pre-flight, the plan against vLLM's KV lines, the first-request rounds and the
CUDA-graph tables are read back from the recorded logs by the same code the check runs."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from bench import mixed
from bench.records import RequestRecord
from budget.options import PlanOptions
from budget.planner import build_plan
from entrypoint.gpu_check import first_request, starts
from entrypoint.gpu_check.check import read_graphs, read_log
from entrypoint.gpu_check.compare import OK, figures
from entrypoint.gpu_check.phases import phases, printed, stamped, table
from entrypoint.graph_hits import coverage, graph_hits
from entrypoint.graph_stats import parse_graph_stats
from entrypoint.logscan import LogWatcher, Observed

RUNS = Path(__file__).parent / "fixtures" / "gpu_h200_check"
COLD, WARM = RUNS / "cold", [RUNS / f"warm{n}" for n in (1, 2, 3)]
BASELINE = RUNS / "baseline_75295f4" / "entrypoint.log"
SECOND = Path(__file__).parent / "fixtures" / "gpu_h200_first_request"
STARTS = [SECOND / name for name in ("cold", "warm1p", "warm2", "warm3", "warm4")]
PRE_FLIGHT = "plan + pre-flight (vLLM's flags read)"
READY = "launch → /ready 200"
CACHED = "accepted these flags before (verdict read from"
CHECKED = "pre-flight ok: vLLM 0.24.0 knows every flag"


def log_phases(path: Path) -> dict[str, float]:
    return phases(stamped(path.read_text()))


def observed(text: str) -> Observed:
    watcher = LogWatcher()
    for line in text.splitlines():
        watcher.feed(line)
    return watcher.snapshot()


def test_a_restart_reads_the_cached_verdict_and_its_pre_flight_takes_under_a_second() -> None:
    for run in WARM:
        text = (run / "entrypoint.log").read_text()
        assert CACHED in text and CHECKED not in text, run.name
        assert log_phases(run / "entrypoint.log")[PRE_FLIGHT] < 1.0, run.name


def test_the_first_start_and_the_baseline_check_the_flags_by_importing_vllm() -> None:
    """The cold start (empty cache directory) and the entrypoint before the verdict was
    cached both import vLLM for the check: 10 s and more on this machine."""
    for path in (COLD / "entrypoint.log", BASELINE):
        assert CHECKED in path.read_text() and CACHED not in path.read_text(), path.parent.name
        assert log_phases(path)[PRE_FLIGHT] > 10.0, path.parent.name


def test_the_phase_table_puts_the_baseline_next_to_the_restarts() -> None:
    runs = {"baseline": stamped(BASELINE.read_text())}
    runs |= {run.name: stamped((run / "entrypoint.log").read_text()) for run in WARM}
    text = table(runs)
    header = text.splitlines()[0]
    assert header == "| phase (s) | baseline | warm1 | warm2 | warm3 |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()[2:]}
    assert PRE_FLIGHT in rows and READY in rows
    for lines in runs.values():
        assert printed(lines)["entrypoint: ready after (s)"] > 0


def hybrid_plan(model: Path) -> object:
    """The settings of these starts: gpu_check's flags (fixtures/gpu_h200_check/README.md),
    prefix caching left to the planner (vLLM 0.24 keeps it off for this hybrid)."""
    options = PlanOptions(
        model=str(model), hardware="h200", vllm_version="0.24.0", mtp=3, max_num_seqs=4,
        max_num_batched_tokens=2048, cudagraph_mode="FULL_DECODE_ONLY",
        cudagraph_capture_sizes=(4, 8, 12, 16),
    )  # fmt: skip
    return build_plan(options, read_weights=False)


@pytest.mark.parametrize(
    "run", [COLD, *WARM, *STARTS], ids=lambda p: f"{p.parent.name[-13:]}/{p.name}"
)
def test_the_plan_against_what_vllm_logged_in_each_start(run: Path, tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    shutil.copy(RUNS / "config.json", model / "config.json")
    assert (SECOND / "config.json").read_text() == (RUNS / "config.json").read_text()
    plan = hybrid_plan(model)
    rows = {f.name: f for f in figures(plan, observed((run / "vllm.log").read_text()))}  # type: ignore[arg-type]
    for name in ("KV pool", "KV cache tokens", "attention block (tokens)", "padding layers"):
        assert rows[name].verdict == OK, (name, rows[name])
    report = json.loads((run / "report.json").read_text())
    assert report["state"] == "ready" and report["passed"]
    assert "--no-enable-prefix-caching" in report["command"]


def test_graph_hits_from_the_whole_vllm_log_of_the_cold_start() -> None:
    """The counts were summed with awk over the log's 31 tables (rows by padded size and
    mode); the 8- and 16-token NONE rows are prefill steps of exactly that many tokens."""
    text = (COLD / "vllm.log").read_text()
    stats = parse_graph_stats(text)
    assert stats is not None
    assert (stats.mode, stats.capture_sizes, stats.tables) == (
        "FULL_DECODE_ONLY",
        (4, 8, 12, 16),
        31,
    )
    predicted = coverage(3, 4, "FULL_DECODE_ONLY", stats.capture_sizes)
    assert predicted["padded"] == {} and predicted["fallback"] == []
    hits = graph_hits(predicted, stats)
    by_width = {w["width"]: w for w in hits["widths"]}
    assert {w: (r["full_steps"], r["fallback_steps"]) for w, r in by_width.items()} == {
        4: (604, 0), 8: (17, 1), 12: (20, 0), 16: (194, 2)
    }  # fmt: skip
    assert all(r["predicted"] == "FULL" for r in by_width.values())
    # A width with any step outside a FULL graph counts as "FULL and fallback".
    assert (hits["full"], hits["fell_back"], hits["not_seen"]) == ([4, 12], [8, 16], [])


def test_the_check_reads_the_same_graph_hits_from_its_entrypoint_log(tmp_path: Path) -> None:
    """read_log splits vLLM's lines out of the stamped entrypoint log: the same tables."""
    _, vllm_lines = read_log(COLD / "entrypoint.log")
    model = tmp_path / "m"
    model.mkdir()
    shutil.copy(RUNS / "config.json", model / "config.json")
    hits = read_graphs(hybrid_plan(model), "\n".join(vllm_lines))  # type: ignore[arg-type]
    assert hits["reported"] and {w["width"] for w in hits["widths"]} == {4, 8, 12, 16}


def test_eager_module_loading_had_not_loaded_the_weights_after_200_s() -> None:
    """CUDA_MODULE_LOADING=EAGER: the engine started at +41 s and logged nothing more
    until the start was stopped at 200 s; a lazy warm start had its weights by +47 s."""
    lines = stamped((RUNS / "eager" / "entrypoint.log").read_text())
    assert not any("weights loaded" in line for _, line in lines)
    assert any("Initializing a V1 LLM engine" in line for _, line in lines)
    assert log_phases(WARM[0] / "entrypoint.log")["weights (dummy) and drafter loaded"] > 0


def worst(streams: list[dict[str, object]], key: str) -> float:
    """The slowest stream's figure: its TTFT, or the mean of its first 8 gaps."""
    if key == "ttft":
        return max(float(s["ttft_seconds"]) for s in streams)  # type: ignore[arg-type]
    return max(statistics.fmean(s["gaps_seconds"][:8]) for s in streams)  # type: ignore[index]


def first_against_steady(run: Path) -> dict[str, tuple[float, float]]:
    """Per shape, (TTFT ratio, first-gaps ratio): the first round against the median of
    the later rounds, worked out here from the rounds the check recorded."""
    rounds = json.loads((run / "report.json").read_text())["first_request"]["rounds"]
    out = {}
    for shape in dict.fromkeys(r["shape"] for r in rounds):
        mine = [r["streams"] for r in rounds if r["shape"] == shape]
        out[shape] = tuple(
            worst(mine[0], key) / statistics.median(worst(r, key) for r in mine[1:])
            for key in ("ttft", "gaps")
        )
    return out  # type: ignore[return-value]


def test_the_first_request_against_steady_state_in_each_start() -> None:
    """The 1.2× target (warm-up on) is missed by at least one shape in four of the five
    starts; the report's own summary says the same as the rounds worked out here."""
    over = set()
    for run in STARTS:
        mine = first_against_steady(run)
        summary = json.loads((run / "report.json").read_text())["first_request_summary"]
        for row in summary:
            ttft, gaps = mine[row["shape"]]
            assert row["ttft_ratio"] == pytest.approx(ttft) and row["gap_ratio"] == pytest.approx(
                gaps
            ), (run.name, row["shape"])
            if max(ttft, gaps) > 1.2:
                over.add((run.name, row["shape"]))
    assert over == {
        ("cold", "decode_x4"),
        ("warm1p", "chat"),
        ("warm1p", "long_prompt"),
        ("warm2", "chat"),
        ("warm2", "decode_x4"),
        ("warm4", "decode_x4"),
    }


def steady_ratios(values: list[float]) -> list[float]:
    """Each steady round (every round but the first) against the median of the other
    steady rounds: the target's ratio for rounds with nothing first about them."""
    steady = values[1:]
    return [v / statistics.median(steady[:i] + steady[i + 1 :]) for i, v in enumerate(steady)]


def test_the_steady_rounds_pass_the_target_s_ratio_among_themselves_too() -> None:
    """docs/gpu-check.md, "On an H200": over all nine starts of both sets, a first round
    exceeds 1.2× its steady median about twice as often as a steady round exceeds 1.2×
    the median of the other steady rounds, and the steady rounds do so often enough
    (more than 1 in 10) that the target sits inside the host's round-to-round spread.
    Where a shape's steady rounds stay within 1.2× of one another, its first round can
    still exceed 1.2×: the 2026-12-06 cold start's 4 decodes.  The counts are the ones
    the docs give, worked out here from the raw streams.  The check's own summary gives
    the same steady spread."""
    first_over = first_n = steady_over = steady_n = 0
    quiet_misses = []
    quiet_starts: dict[str, list[float]] = {}  # start → its first-round ratios
    worst_steady: dict[str, float] = {}  # start → its steady rounds' worst own ratio
    for run in [COLD, *WARM, *STARTS]:
        report = json.loads((run / "report.json").read_text())
        rounds = report["first_request"]["rounds"]
        spreads: dict[tuple[str, str], float] = {}
        firsts = []
        for shape in dict.fromkeys(r["shape"] for r in rounds):
            mine = [r["streams"] for r in rounds if r["shape"] == shape]
            for key in ("ttft", "gaps"):
                values = [worst(streams, key) for streams in mine]
                first = values[0] / statistics.median(values[1:])
                own = steady_ratios(values)
                first_n, first_over = first_n + 1, first_over + (first > 1.2)
                steady_n, steady_over = steady_n + len(own), steady_over + sum(r > 1.2 for r in own)
                if first > 1.2 and max(own) <= 1.2:
                    quiet_misses.append((run.parent.name, run.name, shape, key))
                spreads[shape, key] = max(own)
                firsts.append(first)
        worst_steady[f"{run.parent.name}/{run.name}"] = max(spreads.values())
        if max(spreads.values()) <= 1.2:
            quiet_starts[f"{run.parent.name}/{run.name}"] = firsts
        for summary in first_request.summarise(
            first_request.run_from_dict(report["first_request"])
        ):
            assert summary.steady_ttft_spread == pytest.approx(spreads[summary.shape, "ttft"])
            assert summary.steady_gap_spread == pytest.approx(spreads[summary.shape, "gaps"])
    assert first_n == 9 * 3 * 2 and steady_n == 5 * first_n
    assert (first_over, steady_over) == (14, 32)  # of 54 and 270: 26 % and 12 %
    assert sorted(quiet_starts) == [
        f"{RUNS.name}/cold",
        f"{RUNS.name}/warm1",
        f"{SECOND.name}/cold",
    ]
    assert sum(r <= 1.2 for firsts in quiet_starts.values() for r in firsts) == 16  # of 18
    noisy = [w for start, w in worst_steady.items() if start not in quiet_starts]
    assert len(noisy) == 6 and (round(min(noisy), 2), round(max(noisy), 2)) == (1.31, 2.12)
    assert steady_over / steady_n > 0.1
    assert first_over / first_n > 1.5 * steady_over / steady_n
    assert {(SECOND.name, "cold", "decode_x4", key) for key in ("ttft", "gaps")} <= set(
        quiet_misses
    )


def test_the_starts_summary_over_the_nine_starts(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m entrypoint.gpu_check.starts` over both sets prints each start's first
    rounds as worked out here from the raw streams, the starts that met the target on
    every shape, and the counts the test above works out and docs/gpu-check.md gives."""
    runs = [COLD, *WARM, *STARTS]
    assert starts.main([str(run) for run in runs]) == 0
    out = capsys.readouterr().out
    for run in runs:
        row = next(
            line
            for line in out.splitlines()
            if line.startswith(f"| {run.parent.name}/{run.name} |")
        )
        for ttft, gaps in first_against_steady(run).values():
            assert f"{ttft:.2f}× ({gaps:.2f}×)" in row.replace("**", "")
            for ratio in (ttft, gaps):  # bold where over the target
                assert (f"**{ratio:.2f}×**" in row) == (ratio > 1.2)
    met = [
        f"{run.parent.name}/{run.name}"
        for run in runs
        if max(max(r) for r in first_against_steady(run).values()) <= 1.2
    ]
    assert met == [f"{RUNS.name}/{n}" for n in ("cold", "warm1", "warm2")] + [
        f"{SECOND.name}/warm3"
    ]
    assert "met in 4 of 9 starts" in out
    firsts = [r for run in runs for pair in first_against_steady(run).values() for r in pair]
    assert f"The typical first round: {statistics.median(firsts):.2f}× of its steady" in out
    assert round(statistics.median(firsts), 2) == 1.06  # docs/gpu-check.md
    assert "First rounds over 1.2× of their steady median: 14 of 54 (26 %)" in out
    assert "steady rounds over 1.2× of their peers: 32 of 270 (12 %)" in out
    assert (
        f"Quiet starts (every steady round within 1.2× of its peers): {RUNS.name}/cold, "
        f"{RUNS.name}/warm1, {SECOND.name}/cold; their first rounds within 1.2×: 16 of 18."
    ) in out


def test_the_quiet_cold_start_s_four_decodes_fade_over_two_rounds() -> None:
    """docs/gpu-check.md: in 2026-12-06's cold start the 4-decode rounds' cost fades
    over the first two rounds after ready, not only the first."""
    rounds = json.loads((STARTS[0] / "report.json").read_text())["first_request"]["rounds"]
    mine = [r for r in rounds if r["shape"] == "decode_x4"]
    ttft = [worst(r["streams"], "ttft") * 1000 for r in mine]
    gaps = [worst(r["streams"], "gaps") * 1000 for r in mine]
    assert [round(r["seconds_after_ready"], 1) for r in mine[:2]] == [0.8, 2.1]
    assert [round(t) for t in ttft[:2]] == [200, 167] and round(statistics.median(ttft[2:])) == 158
    assert [round(g, 1) for g in gaps[:2]] == [12.6, 11.1]
    assert round(statistics.median(gaps[2:]), 1) == 9.9
    assert ttft[0] > ttft[1] > max(ttft[2:]) and gaps[0] > gaps[1] > max(gaps[2:])


def test_the_restarts_of_the_second_set_read_the_cached_verdict() -> None:
    """warm2-4 repeat the cold start's argv: no vLLM import. warm1p adds --profile, a new
    argv, so its pre-flight imports vLLM again."""
    for run in STARTS[2:]:
        text = (run / "entrypoint.log").read_text()
        assert CACHED in text and log_phases(run / "entrypoint.log")[PRE_FLIGHT] < 1.0, run.name
    for run in STARTS[:2]:
        assert CHECKED in (run / "entrypoint.log").read_text(), run.name


def engine_config(text: str) -> str:
    match = re.search(r"Initializing a V1 LLM engine \(v0\.24\.0\) with config: (.*)", text)
    assert match, "no engine config line"
    return match[1]


def test_the_mixed_runs_differ_only_in_scheduler_and_graph_settings() -> None:
    plan_log = (SECOND / "mixed_plan" / "entrypoint.log").read_text()
    defaults_log = (SECOND / "mixed_defaults" / "vllm.log").read_text()
    for text in (plan_log, defaults_log):
        config = engine_config(text)
        assert "method='mtp'" in config and "num_spec_tokens=3" in config
        assert "enable_prefix_caching=False" in config and "max_seq_len=65536" in config
    assert "CUDAGraphMode.FULL_DECODE_ONLY" in engine_config(plan_log)
    assert "CUDAGraphMode.FULL_AND_PIECEWISE" in engine_config(defaults_log)
    assert "--max-num-batched-tokens 2048" in plan_log and "--max-num-seqs 4" in plan_log
    assert "Chunked prefill is enabled with max_num_batched_tokens=8192." in defaults_log


def flat(value: object, key: str = "") -> dict[str, float]:
    """Nested figures as one mapping of numbers (booleans and counts too)."""
    if isinstance(value, dict):
        items = value.items()
        return {k: v for name, item in items for k, v in flat(item, f"{key}/{name}").items()}
    if isinstance(value, list | tuple):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{key}/{i}").items()}
    return {key: float(value)}  # type: ignore[arg-type]


@pytest.mark.parametrize("run", ["mixed_plan", "mixed_defaults"])
def test_the_mixed_figures_come_back_from_the_recorded_requests(run: str) -> None:
    """The harness's summary from its own records; the long prompt's TTFT worked out here."""
    lines = (SECOND / run / "records.jsonl").read_text().splitlines()
    records = [RequestRecord.from_dict(json.loads(line)) for line in lines]
    saved = json.loads((SECOND / run / "summary.json").read_text())["workloads"]["mixed"]
    again = mixed.summarize(records)
    # records keep µs: times agree to 2e-5 s, rates to 1e-6 of themselves
    assert flat(again) == pytest.approx(flat(saved["summary"]), rel=1e-6, abs=2e-5)
    prompt = next(json.loads(line) for line in lines if json.loads(line)["group"] == "prefill")
    assert prompt["prompt_tokens"] == 48_679
    first_token = prompt["chunk_times_s"][0] - prompt["start_s"]
    assert again["ttft_s"] == pytest.approx(first_token, abs=1e-5)
    assert saved["counters"]["spec_decode_drafts"] > 0  # MTP ran (dummy weights: none accepted)
