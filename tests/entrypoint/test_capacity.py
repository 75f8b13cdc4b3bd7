"""The start-up line and metric that say which KV term differs from the plan, from the
lines a real vLLM 0.24.0 logged (fixtures/public/club3090-612…: Qwen3.6-35B-A3B,
fp8 KV, 131,072 tokens, RTX 5090); no vLLM needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from budget.options import PlanOptions
from budget.plan import Plan
from budget.planner import build_plan
from budget.units import GiB
from entrypoint.capacity import capacity_line, capacity_terms
from entrypoint.logscan import LogWatcher, Observed
from entrypoint.metrics import BudgetCollector

FIXTURE = (
    Path(__file__).parents[1]
    / "budget"
    / "fixtures"
    / "public"
    / "club3090-612_qwen3.6-35b-a3b_v0.24.0.log"
)
LOGGED_POOL_BYTES = round(5.98 * GiB)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    header = [line for line in FIXTURE.read_text().splitlines() if line.startswith("# config: ")]
    path = tmp_path_factory.mktemp("qwen3.6")
    (path / "config.json").write_text(header[0].removeprefix("# config: "))
    return path


def plan_for(model_dir: Path, vllm_version: str, **changes: object) -> Plan:
    options = {
        "model": str(model_dir),
        "hardware": "rtx-5090",
        "max_model_len": 131_072,
        "kv_cache_dtype": "fp8",
        "prefix_caching": True,
        "kv_cache_memory_bytes": LOGGED_POOL_BYTES,
        "vllm_version": vllm_version,
        **changes,
    }
    return build_plan(PlanOptions(**options))  # type: ignore[arg-type]


def observed(extra: tuple[str, ...] = ()) -> Observed:
    watcher = LogWatcher()
    for line in (*FIXTURE.read_text().splitlines(), *extra):
        watcher.feed(line)
    return watcher.snapshot()


def differences(plan: Plan, seen: Observed) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(BudgetCollector(plan, lambda: seen))
    values = {}
    for term in ("block_size", "padding_layers", "blocks_per_request", "pool_bytes"):
        value = registry.get_sample_value("sparkserve_budget_capacity_difference", {"term": term})
        assert value is not None, term
        values[term] = value
    return values


def test_planned_for_the_vllm_that_ran_nothing_differs(model_dir: Path) -> None:
    plan = plan_for(model_dir, "0.24.0")
    seen = observed()
    assert capacity_line(plan, seen) is None
    assert set(differences(plan, seen).values()) == {0}


def test_planned_for_0_33_with_flashinfer_names_block_and_blocks_per_request(
    model_dir: Path,
) -> None:
    """0.33 on SM 12.0 with FlashInfer's GDN prefill: lcm-64 block, one more block per
    GDN group; the pool is the same, so pool bytes are not named."""
    plan = plan_for(model_dir, "0.33.0", gdn_prefill_backend="flashinfer")
    seen = observed(("INFO [interface.py:1] Setting attention block size to 2096 tokens",))
    line = capacity_line(plan, seen)
    assert line is not None
    assert "block size: planned 2,112, vLLM 2,096" in line
    assert "blocks per request: planned 72, vLLM 69" in line
    assert "pool bytes" not in line and "padding" not in line
    assert differences(plan, seen)["block_size"] == -16
    assert differences(plan, seen)["blocks_per_request"] == -3


def test_a_different_pool_is_named(model_dir: Path) -> None:
    plan = plan_for(model_dir, "0.24.0", kv_cache_memory_bytes=6 * GiB)
    line = capacity_line(plan, observed())
    assert line is not None and "pool bytes: planned 6.00 GiB, vLLM 5.98 GiB" in line
    assert "block size" not in line


def test_padding_layers_are_compared(model_dir: Path) -> None:
    plan = plan_for(model_dir, "0.24.0")
    seen = observed(
        (
            "WARNING [kv_cache_utils.py:1] Add 3 padding layers, may waste at most 10.00% "
            "KV cache memory",
        )
    )
    line = capacity_line(plan, seen)
    assert line is not None and "padding layers: planned 0, vLLM 3" in line


def test_nothing_before_the_capacity_line(model_dir: Path) -> None:
    plan = plan_for(model_dir, "0.33.0")
    assert capacity_terms(plan, Observed()) == ()
    assert capacity_line(plan, Observed()) is None
