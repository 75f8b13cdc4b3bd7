"""--node-link-gbs / --node-link-latency-us: a measured link between nodes in the estimate.

The expected link times are worked out by hand from `comm_seconds`' documented terms: per
decode step, two ring all-reduces per layer with TP (latency + 2·(tp−1)/tp · payload /
bandwidth each), one hand-off per stage boundary with PP (latency + payload / bandwidth),
payload = hidden × 2 bytes (bf16) × tokens per step.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from budget.errors import BudgetError
from budget.options import PlanOptions
from budget.planner import build_plan
from entrypoint.config import load_config
from entrypoint.errors import ConfigError

# qwen3.8-27b's profile: hidden_size 5120, 64 layers; MTP off → 1 token per step.
# payload = 5120 × 2 × 1 = 10,240 bytes; link 2 GB/s, 100 µs.
MESSAGE_SECONDS = 100e-6 + 10_240 / 2e9  # 105.12 µs
TP2_SECONDS = 2 * 64 * (100e-6 + 2 * 1 / 2 * 10_240 / 2e9)  # 13.45536 ms
PP2_SECONDS = 1 * MESSAGE_SECONDS  # one stage boundary


def two_sparks(tp: int, pp: int, **link: float) -> PlanOptions:
    return PlanOptions(
        model="qwen3.8-27b", hardware="dgx-spark", nodes=2, tp=tp, pp=pp, mtp=0, **link
    )


@pytest.mark.parametrize(("tp", "pp", "expected"), [(2, 1, TP2_SECONDS), (1, 2, PP2_SECONDS)])
def test_the_given_link_sets_the_comm_time(tp: int, pp: int, expected: float) -> None:
    plan = build_plan(two_sparks(tp, pp, node_link_gbs=2, node_link_latency_us=100))
    assert plan.speed.comm_seconds_per_step == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("tp", "pp", "expected"), [(2, 1, TP2_SECONDS), (1, 2, PP2_SECONDS)])
def test_decode_speed_moves_by_the_link_time_only(tp: int, pp: int, expected: float) -> None:
    profile_link = build_plan(two_sparks(tp, pp)).speed
    given = build_plan(two_sparks(tp, pp, node_link_gbs=2, node_link_latency_us=100)).speed
    # one token per step: seconds per step = memory time + link time
    memory_seconds = 1 / profile_link.decode_tokens_per_s - profile_link.comm_seconds_per_step
    assert given.decode_tokens_per_s == pytest.approx(1 / (memory_seconds + expected), rel=1e-9)
    assert given.decode_tokens_per_s < profile_link.decode_tokens_per_s  # 2 GB/s < 25 GB/s


def test_one_of_the_two_keeps_the_profile_for_the_other() -> None:
    # dgx-spark.toml: node link 25 GB/s; only the latency is given (100 µs)
    plan = build_plan(two_sparks(1, 2, node_link_latency_us=100))
    assert plan.speed.comm_seconds_per_step == pytest.approx(100e-6 + 10_240 / 25e9, rel=1e-9)


def test_the_json_names_the_link_and_where_it_came_from() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "budget", "plan", "--model", "qwen3.8-27b", "--hardware",
         "dgx-spark", "--nodes", "2", "--tp", "2", "--mtp", "0", "--node-link-gbs", "2",
         "--node-link-latency-us", "100", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr  # 1: does not fit; the estimate is there
    link = json.loads(proc.stdout)["speed_estimate"]["link"]
    assert link == {
        "between": "nodes",
        "gbs": 2.0,
        "latency_us": 100.0,
        "source": "--node-link-gbs/--node-link-latency-us",
    }


def test_the_table_states_the_link() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "budget", "plan", "--model", "qwen3.8-27b", "--hardware",
         "dgx-spark", "--nodes", "2", "--pp", "2", "--tp", "1", "--mtp", "0",
         "--node-link-gbs", "2", "--node-link-latency-us", "100"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "link      0.11 ms/step of that on the link between nodes: 2 GB/s, 100 µs" in (
        proc.stdout
    ), proc.stdout + proc.stderr


def test_one_node_warns_that_the_link_is_unused() -> None:
    plan = build_plan(PlanOptions(node_link_gbs=2))
    assert any("this plan has one node" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--node-link-gbs", "0"), ("--node-link-gbs", "fast"), ("--node-link-latency-us", "-5")],
)
def test_a_bad_link_value_exits_2_naming_the_flag(flag: str, value: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "budget", "plan", flag, value],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"argument {flag}: '{value}': must be a number > 0" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_options_built_in_code_are_checked_too(value: float) -> None:
    with pytest.raises(BudgetError, match="node_link_gbs=.*must be a number > 0"):
        build_plan(two_sparks(2, 1, node_link_gbs=value))


def test_the_entrypoint_reads_the_link_from_its_environment() -> None:
    config = load_config(
        {"SPARKSERVE_NODE_LINK_GBS": "1.5", "SPARKSERVE_NODE_LINK_LATENCY_US": "60"}
    )
    assert (config.plan.node_link_gbs, config.plan.node_link_latency_us) == (1.5, 60.0)
    with pytest.raises(ConfigError, match="SPARKSERVE_NODE_LINK_LATENCY_US='0': must be a"):
        load_config({"SPARKSERVE_NODE_LINK_LATENCY_US": "0"})
