"""`python -m budget plan` as users and outside checks call it (docs/budget.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from budget.cli import main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "budget", "plan", *args], capture_output=True, text=True, timeout=120
    )


def test_default_table_exits_0_and_shows_verdict() -> None:
    proc = run()
    assert proc.returncode == 0, proc.stderr
    assert "FITS" in proc.stdout and "vllm serve" in proc.stdout
    assert "estimate:" in proc.stdout  # estimated terms say how


def test_json_contract_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key, kind in [
        ("fits", bool),
        ("kv_cache_tokens", int),
        ("max_concurrency", float),
        ("block_size", int),
        ("kv_cache_bytes", int),
        ("total_bytes", int),
        ("usable_bytes", int),
        ("headroom_bytes", int),
        ("components", dict),
        ("suggestions", list),
        ("vllm_args", list),
        ("warnings", list),
    ]:
        assert isinstance(data[key], kind), key


def test_argv_one_argument_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--format", "argv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("--max-model-len") + 1] == "262144"
    assert '{"method":"mtp","num_speculative_tokens":3}' in lines


def test_env_lines_feed_compose(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--format", "env"]) == 0
    env = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    assert env["SPARKSERVE_MODEL"] == "qwen3.8-flash-next"
    assert env["SPARKSERVE_MTP"] == "3"
    assert int(env["SPARKSERVE_KV_CACHE_MEMORY_BYTES"]) > 0


def test_does_not_fit_exits_1_with_reasons() -> None:
    proc = run("--hardware", "rtx-4090")
    assert proc.returncode == 1
    assert "DOES NOT FIT" in proc.stdout and "short by" in proc.stdout


def test_kv_bytes_accept_vllm_suffix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--json", "--kv-cache-memory-bytes", "20G"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_cache_bytes"] == 20 * 1024**3


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "no-such-model"],
        ["--max-num-seqs", "0"],
        ["--kv-cache-dtype", "fp4"],
        ["--kv-cache-memory-bytes", "lots"],
        ["--cudagraph-capture-sizes", "4,x"],
        ["--tp", "two"],
        ["--chart", "out.pdf"],
        ["--device", "cpu", "--cpu-avx512-bf16", "maybe"],
        ["--hardware", "h200", "--cpu-avx512-bf16", "yes"],
        ["--vllm-version", "latest"],
        ["--gdn-prefill-backend", "fla"],
    ],
)
def test_bad_input_is_exit_2_and_one_line(args: list[str]) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_config_dir_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    proc = run("--model", str(tmp_path), "--hardware", "h200")
    assert proc.returncode == 2 and "num_hidden_layers" in proc.stderr


def test_chart_png_written(tmp_path: Path) -> None:
    out = tmp_path / "plan.png"
    assert main(["plan", "--chart", str(out), "--format", "json"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profiles_listing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    for name in [
        "qwen3.8-flash-next",
        "qwen3.8-27b",
        "llama-3.1-8b",
        "dgx-spark",
        "rtx-5060ti-16gb",
        "h200",
    ]:
        assert name in out


def test_cpu_avx512_bf16_flag_reaches_the_json(capsys: pytest.CaptureFixture[str]) -> None:
    hybrid = ["plan", "--model", "qwen3-next-80b-a3b", "--device", "cpu", "--memory-gib", "256"]
    hybrid += ["--format", "json"]
    plans = {}
    for answer in ("yes", "no"):
        assert main([*hybrid, "--cpu-avx512-bf16", answer]) == 0
        plans[answer] = json.loads(capsys.readouterr().out)
    assert (plans["yes"]["cpu_avx512_bf16"], plans["no"]["cpu_avx512_bf16"]) == (True, False)
    # fp32 SSM state: larger GDN pages, so fewer tokens in the same pool.
    assert plans["yes"]["kv_cache_tokens"] < plans["no"]["kv_cache_tokens"]


def test_vllm_version_and_its_rules_reach_the_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--json", "--vllm-version", "0.23.1rc1.dev531+ga65f93fb2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vllm_version"] == "0.23.1rc1.dev531+ga65f93fb2"
    assert data["vllm_rules"]["name"] == "0.20.1-0.25"
    assert data["settings"]["prefix_caching"] is False  # 0.20.1-0.25: off for hybrids
    assert "--no-enable-prefix-caching" in data["vllm_args"]


def test_unknown_vllm_version_warns_with_the_rules_applied(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--json", "--vllm-version", "0.99.0"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any("0.99.0" in w and "0.34 rules" in w for w in warnings), warnings


def test_gdn_prefill_backend_is_passed_to_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--format", "argv", "--gdn-prefill-backend", "triton"]) == 0
    args = capsys.readouterr().out.splitlines()
    assert args[args.index("--gdn-prefill-backend") + 1] == "triton"
