"""Plan invariants and the does-not-fit advice."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget.errors import BudgetError
from budget.flags import vllm_args
from budget.host import cpu_has_avx512_bf16
from budget.options import HostFacts, PlanOptions
from budget.plan_dict import plan_dict
from budget.planner import build_plan
from budget.profiles import GiB


@settings(max_examples=25, deadline=None)
@given(mem=st.floats(min_value=20, max_value=200), extra=st.floats(min_value=0.5, max_value=50))
def test_more_memory_never_fewer_tokens(mem: float, extra: float) -> None:
    """At the same scheduler settings; vLLM's own defaults step up with memory (below)."""
    fixed = {"max_model_len": 32768, "max_num_seqs": 256, "max_num_batched_tokens": 2048}
    small = build_plan(PlanOptions(model="qwen3-30b-a3b", memory_gib=mem, **fixed))
    big = build_plan(PlanOptions(model="qwen3-30b-a3b", memory_gib=mem + extra, **fixed))
    assert big.kv_cache_tokens >= small.kv_cache_tokens


def test_vllms_batch_defaults_step_up_at_70_and_160_gib() -> None:
    """arg_utils.py `get_batch_defaults`: a larger chunk and more sequences from 70 GiB
    and 160 GiB of device memory, so the activation peak grows and the pool can shrink."""
    chosen = {}
    for mem in (69.75, 70.0, 159.75, 160.0):
        plan = build_plan(PlanOptions(model="qwen3-30b-a3b", memory_gib=mem, max_model_len=32768))
        chosen[mem] = (plan.settings.max_num_batched_tokens, plan.settings.max_num_seqs)
    assert chosen == {
        69.75: (2048, 256), 70.0: (8192, 1024), 159.75: (8192, 1024), 160.0: (16384, 1024)
    }  # fmt: skip


@settings(max_examples=20, deadline=None)
@given(
    model=st.sampled_from(["qwen3.8-flash-next", "qwen3-next-80b-a3b", "llama-3.1-8b"]),
    hw=st.sampled_from(["dgx-spark", "h200", "rtx-pro-6000", "rtx-5090"]),
    seqs=st.integers(1, 64),
    chunk=st.sampled_from([512, 2048, 8192]),
)
def test_components_sum_to_total(model: str, hw: str, seqs: int, chunk: int) -> None:
    plan = build_plan(
        PlanOptions(
            model=model,
            hardware=hw,
            max_num_seqs=seqs,
            max_num_batched_tokens=chunk,
            max_model_len=32768,
        )
    )
    data = plan_dict(plan)
    assert sum(data["components"].values()) == data["total_bytes"]
    assert data["usable_bytes"] - data["total_bytes"] == data["headroom_bytes"]
    assert data["fits"] == (data["headroom_bytes"] >= 0 and data["max_concurrency"] >= 1)


def test_tp2_halves_weights_per_rank() -> None:
    one = build_plan(PlanOptions(model="llama-3.1-8b", hardware="h100-80gb"))
    two = build_plan(PlanOptions(model="llama-3.1-8b", hardware="h100-80gb", tp=2))
    assert two.components["weights.dense_mlp"] * 2 == pytest.approx(
        one.components["weights.dense_mlp"], rel=1e-6
    )
    assert "--tensor-parallel-size" in vllm_args(two)


def test_fp8_kv_doubles_dense_capacity_at_fixed_pool() -> None:
    base = dict(model="llama-3.1-8b", hardware="h100-80gb", kv_cache_memory_bytes=8 * GiB)
    bf16 = build_plan(PlanOptions(**base))  # type: ignore[arg-type]
    fp8 = build_plan(PlanOptions(kv_cache_dtype="fp8", **base))  # type: ignore[arg-type]
    assert fp8.kv_cache_tokens == 2 * bf16.kv_cache_tokens


def test_not_fitting_names_component_and_computed_fixes() -> None:
    plan = build_plan(PlanOptions(hardware="rtx-5090"))
    assert not plan.fits
    assert "short by" in plan.suggestions[0] and "weights.routed_experts" in plan.suggestions[0]
    text = "\n".join(plan.suggestions)
    assert "--hardware" in text and "--tp" in text


def test_too_long_context_suggests_largest_that_fits() -> None:
    plan = build_plan(
        PlanOptions(model="llama-3.1-8b", hardware="rtx-4090", max_model_len=131072, max_num_seqs=8)
    )
    assert not plan.fits
    tip = next(t for t in plan.suggestions if "largest context" in t)
    ctx = int(tip.split()[1].rstrip(":"))
    fits = build_plan(
        PlanOptions(model="llama-3.1-8b", hardware="rtx-4090", max_model_len=ctx, max_num_seqs=8)
    )
    too_long = build_plan(
        PlanOptions(
            model="llama-3.1-8b", hardware="rtx-4090", max_model_len=ctx + 1, max_num_seqs=8
        )
    )
    assert fits.fits and not too_long.fits


def test_fixed_pool_larger_than_memory_does_not_fit() -> None:
    plan = build_plan(PlanOptions(kv_cache_memory_bytes=100 * GiB))
    assert not plan.fits and plan.headroom_bytes < 0


def test_utilization_predicts_pool_and_emits_fraction() -> None:
    plan = build_plan(
        PlanOptions(model="llama-3.1-8b", hardware="h200", gpu_memory_utilization=0.5)
    )
    assert "--gpu-memory-utilization" in vllm_args(plan)
    lower = build_plan(
        PlanOptions(model="llama-3.1-8b", hardware="h200", gpu_memory_utilization=0.4)
    )
    assert plan.kv_cache_bytes > lower.kv_cache_bytes


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (PlanOptions(model="nope"), "neither a profile nor a directory"),
        (PlanOptions(hardware="tpu-v9"), "not a profile"),
        (PlanOptions(max_num_seqs=0), "max_num_seqs=0"),
        (PlanOptions(mtp=3, model="llama-3.1-8b", hardware="h200"), "no MTP layers"),
        (PlanOptions(gpu_memory_utilization=1.5), "gpu_memory_utilization=1.5"),
        (PlanOptions(block_size=20), "multiple of 16"),
        (PlanOptions(ple_hot_fraction=2.0), "between 0 and 1"),
        (PlanOptions(device="cpu", tp=2), "one rank only"),
    ],
)
def test_impossible_settings_are_clear_errors(options: PlanOptions, message: str) -> None:
    with pytest.raises(BudgetError, match=message):
        build_plan(options)


def test_model_dir_uses_vllm_defaults(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from devtools.tiny_model import write_tiny_model

    model = write_tiny_model(tmp_path / "m", "hybrid-mtp")
    plan = build_plan(PlanOptions(model=str(model), hardware="h200"))
    s = plan.settings
    assert (s.mtp, s.prefix_caching, s.max_model_len) == (0, True, 4096)
    assert (s.max_num_batched_tokens, s.max_num_seqs) == (8192, 1024)  # vLLM's ≥70 GiB defaults
    assert vllm_args(plan)[:2] == ["--model", str(model)]


def test_undercovered_decode_widths_warn() -> None:
    # The default profile: MTP 3, 4 sequences, FULL_DECODE_ONLY.
    plan = build_plan(PlanOptions(cudagraph_capture_sizes=(4, 8)))
    assert any("widths 12 (NONE), 16 (NONE) have no full graph" in w for w in plan.warnings)
    plan = build_plan(PlanOptions(cudagraph_capture_sizes=(4, 8, 16)))
    assert any("widths 12→16 replay the next captured graph, padded" in w for w in plan.warnings)
    assert not any("no full graph" in w for w in plan.warnings)
    plan = build_plan(PlanOptions(cudagraph_capture_sizes=(4, 8, 12, 16)))
    assert not any("decode widths" in w for w in plan.warnings)


CPUINFO = "processor\t: {n}\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 {extra}\n\n"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [("avx512f avx512_bf16 avx512_vnni", True), ("avx512f avx512_vnni", False), ("", False)],
)
def test_avx512_bf16_is_read_from_the_cpu_flags(tmp_path, extra: str, expected: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("".join(CPUINFO.format(n=n, extra=extra) for n in range(2)))
    assert cpu_has_avx512_bf16(cpuinfo) is expected


def test_no_cpuinfo_means_no_avx512_bf16(tmp_path) -> None:
    assert cpu_has_avx512_bf16(tmp_path / "absent") is False


def test_avx512_bf16_only_changes_gdn_models() -> None:
    def tokens(model: str, avx: bool) -> int:
        options = PlanOptions(model=model, device="cpu", cpu_avx512_bf16=avx, memory_gib=256)
        return build_plan(options).kv_cache_tokens

    hybrid, dense = "qwen3-next-80b-a3b", "llama-3.1-8b"
    assert tokens(hybrid, True) < tokens(hybrid, False)
    assert tokens(dense, True) == tokens(dense, False)


def test_avx512_bf16_on_a_gpu_plan_is_refused() -> None:
    options = PlanOptions(model="qwen3-next-80b-a3b", hardware="h200", cpu_avx512_bf16=True)
    with pytest.raises(BudgetError, match="cpu_avx512_bf16 is for vllm-cpu plans; the device is"):
        build_plan(options)


@pytest.mark.parametrize("avx", [True, False])
def test_a_cpu_plan_defaults_to_the_hosts_cpu(avx: bool) -> None:
    options = PlanOptions(model="qwen3-next-80b-a3b", device="cpu")
    plan = build_plan(options, HostFacts(cpu_avx512_bf16=avx))
    assert plan.settings.hardware.cpu_avx512_bf16 is avx
    assert ("AVX512-BF16" in plan.settings.hardware.description) is avx


def test_the_planner_reads_nothing_of_the_host_it_is_not_given() -> None:
    plan = build_plan(PlanOptions(model="qwen3-next-80b-a3b", device="cpu"))
    assert plan.settings.hardware.cpu_avx512_bf16 is False
