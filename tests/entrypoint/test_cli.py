"""`python -m entrypoint` as a process: exit codes and one-line errors (no vLLM started)."""

import os
import subprocess
import sys

import pytest

from entrypoint.cli import build_parser
from entrypoint.config import OPTIONS
from tests.vllm_proc import free_port


def run_entrypoint(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKSERVE_")}
    full_env.update(SPARKSERVE_PORT=str(free_port()), SPARKSERVE_CONTROL_PORT=str(free_port()))
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "entrypoint", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_help_lists_every_variable():
    text = build_parser().format_help()
    for option in OPTIONS:
        assert option.env in text and option.flag in text


def test_dry_run_prints_plan_and_command(tiny_model_dir):
    done = run_entrypoint(
        "--dry-run",
        SPARKSERVE_MODEL=str(tiny_model_dir),
        SPARKSERVE_KV_CACHE_MEMORY_BYTES="256M",
        SPARKSERVE_VLLM_EXTRA_ARGS="--enforce-eager",
    )
    assert done.returncode == 0, done.stderr
    assert "FITS" in done.stdout
    assert "--kv-cache-memory-bytes 268435456" in done.stdout
    assert done.stdout.rstrip().endswith("--enforce-eager")


def test_dry_run_of_a_plan_that_does_not_fit_exits_1(tiny_model_dir):
    done = run_entrypoint(
        "--dry-run",
        "--max-model-len",
        "4096",
        SPARKSERVE_MODEL=str(tiny_model_dir),
        SPARKSERVE_HARDWARE="rtx-4090",
        SPARKSERVE_DEVICE="cuda",
        SPARKSERVE_KV_CACHE_MEMORY_BYTES="1T",
        SPARKSERVE_LOAD_FORMAT="dummy",  # the tiny directory holds no weights
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the plan does not fit" in done.stdout
    forced = run_entrypoint(
        "--dry-run",
        "--force",
        SPARKSERVE_MODEL=str(tiny_model_dir),
        SPARKSERVE_HARDWARE="rtx-4090",
        SPARKSERVE_DEVICE="cuda",
        SPARKSERVE_KV_CACHE_MEMORY_BYTES="1T",
    )
    assert forced.returncode == 0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SPARKSERVE_PORT": "http"},
            "sparkserve: error: SPARKSERVE_PORT='http': must be an integer",
        ),
        ({"SPARKSERVE_MODEL": "/no/such/dir"}, "SPARKSERVE_MODEL=/no/such/dir: no such directory"),
        ({"SPARKSERVE_MODEL": "no-such-profile"}, "is neither a profile nor a directory"),
    ],
)
def test_bad_configuration_is_one_line_and_exit_2(env, message):
    done = run_entrypoint(**env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert message in done.stderr


def test_plan_that_does_not_fit_exits_1_before_launch(tiny_model_dir):
    done = run_entrypoint(
        SPARKSERVE_MODEL=str(tiny_model_dir),
        SPARKSERVE_HARDWARE="rtx-4090",
        SPARKSERVE_DEVICE="cuda",
        SPARKSERVE_KV_CACHE_MEMORY_BYTES="1T",
        SPARKSERVE_LOAD_FORMAT="dummy",  # the tiny directory holds no weights
    )
    assert done.returncode == 1
    assert "the plan does not fit" in done.stderr
    assert "launching" not in done.stdout


def test_unknown_vllm_flag_names_flag_and_version(tiny_model_dir):
    """Imports vLLM's parser (~15 s) but starts no server."""
    done = run_entrypoint(
        SPARKSERVE_MODEL=str(tiny_model_dir),
        SPARKSERVE_KV_CACHE_MEMORY_BYTES="256M",
        SPARKSERVE_VLLM_EXTRA_ARGS="--enforce-eager --no-such-flag 1",
        SPARKSERVE_LOAD_FORMAT="dummy",
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "sparkserve: error: vLLM 0.32.0 does not know --no-such-flag "
        "(from SPARKSERVE_VLLM_EXTRA_ARGS)"
    ) in done.stderr
    assert "launching" not in done.stdout


def test_a_key_in_vllms_config_file_is_refused_in_pre_flight(tiny_model_dir, tmp_path):
    """vLLM would take `api-key` from its `--config` file and the warm-up would not send
    it: refused before vLLM is imported, naming the file, not echoing the key."""
    config = tmp_path / "vllm.yaml"
    config.write_text("enforce-eager: true\napi_key: sk-from-the-file\n")
    done = run_entrypoint(
        SPARKSERVE_MODEL=str(tiny_model_dir),
        SPARKSERVE_KV_CACHE_MEMORY_BYTES="256M",
        SPARKSERVE_VLLM_EXTRA_ARGS=f"--config {config}",
        SPARKSERVE_LOAD_FORMAT="dummy",
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"SPARKSERVE_VLLM_EXTRA_ARGS --config {config} sets api-key" in done.stderr
    assert "sk-from-the-file" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "launching" not in done.stdout
