"""Bootstrap intervals and verdicts of the gateway overhead benchmark
(bench/overhead_stats.py), and its saved runs (--save / --pool)."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest

from bench.overhead_report import Round, load_rounds, print_level
from bench.overhead_stats import (
    TOKENS_PER_S,
    TTFT_P50,
    Estimate,
    Ratios,
    Target,
    across_runs,
    bootstrap,
    fitted_ttft,
    paired,
    paired_ttft,
)
from tests.bench.overhead_cli import run_overhead


def _rounds(rng: random.Random, n: int, ttft_scale: float, rate_scale: float) -> list[Round]:
    """`n` rounds of 32 streams: a per-round drift shared by the round's streams (as a
    vLLM batch shares its steps), per-stream jitter, and the given scales."""
    out = []
    for _ in range(n):
        drift = rng.lognormvariate(0, 0.08)
        ttfts = [0.1 * ttft_scale * drift * rng.lognormvariate(0, 0.05) for _ in range(32)]
        out.append(Round(ttfts, tokens=2048, wall_s=1.0 * drift / rate_scale))
    return out


def test_the_interval_covers_the_true_ratio_about_as_often_as_it_says() -> None:
    rng = random.Random(7)
    covered, trials = 0, 40
    for trial in range(trials):
        direct = _rounds(rng, 30, 1.0, 1.0)
        path = _rounds(rng, 30, 1.10, 0.92)
        ratios = Ratios.of(path, direct, seed=trial)
        e = ratios.ttft_p50
        covered += e.low <= 1.10 <= e.high
        assert e.low <= e.value <= e.high
    # Nominal 95 %; a percentile bootstrap on 30 rounds runs a little narrow.
    assert covered >= 0.8 * trials


def test_more_rounds_narrow_the_interval() -> None:
    rng = random.Random(3)
    few = Ratios.of(_rounds(rng, 8, 1.1, 1.0), _rounds(rng, 8, 1.0, 1.0)).ttft_p50
    many = Ratios.of(_rounds(rng, 120, 1.1, 1.0), _rounds(rng, 120, 1.0, 1.0)).ttft_p50
    assert many.high - many.low < (few.high - few.low) / 2


def test_a_clear_miss_and_a_clear_pass_get_verdicts_and_a_close_call_does_not() -> None:
    rng = random.Random(11)
    direct = _rounds(rng, 60, 1.0, 1.0)
    slow = Ratios.of(_rounds(rng, 60, 1.30, 0.80), direct)
    same = Ratios.of(_rounds(rng, 60, 1.0, 1.0), direct)
    close = Ratios.of(_rounds(rng, 60, 1.05, 0.95), direct)
    assert TTFT_P50.verdict(slow.ttft_p50) == "missed"
    assert TOKENS_PER_S.verdict(slow.tokens_per_s) == "missed"
    assert TTFT_P50.verdict(same.paired_ttft_p50) == "met"
    assert TOKENS_PER_S.verdict(same.paired_tokens_per_s) == "met"
    assert TTFT_P50.verdict(close.ttft_p50) == "undecided"


@pytest.mark.parametrize(
    ("at_most", "low", "high", "verdict"),
    [
        (True, 1.00, 1.04, "met"),
        (True, 1.00, 1.06, "undecided"),
        (True, 1.06, 1.09, "missed"),
        (False, 0.96, 0.99, "met"),
        (False, 0.94, 0.99, "undecided"),
        (False, 0.90, 0.94, "missed"),
        (True, float("nan"), float("nan"), "undecided"),
    ],
)
def test_verdict_needs_the_whole_interval_on_one_side(
    at_most: bool, low: float, high: float, verdict: str
) -> None:
    target = Target("x", 1.05 if at_most else 0.95, at_most=at_most)
    assert target.verdict(Estimate((low + high) / 2, low, high)) == verdict


def test_one_round_has_no_interval_and_no_verdict() -> None:
    e = bootstrap(1, lambda idx: 1.2)
    assert e.value == 1.2 and math.isnan(e.low) and math.isnan(e.high)
    assert TTFT_P50.verdict(e) == "undecided"


def test_rounds_are_resampled_in_pairs() -> None:
    # Drift shared by each pair dominates; the paired ratio is exactly 1.2 in every
    # round, so resampling pairs together gives a zero-width interval.
    direct = [Round([0.1 * k] * 4, tokens=10, wall_s=1.0) for k in range(1, 21)]
    path = [Round([0.12 * k] * 4, tokens=10, wall_s=1.0) for k in range(1, 21)]
    e = bootstrap(20, paired(paired_ttft(path, direct)))
    assert e.low == pytest.approx(1.2) and e.high == pytest.approx(1.2)


def test_unpaired_rounds_are_refused() -> None:
    with pytest.raises(ValueError, match="not paired"):
        Ratios.of([Round([0.1], 1, 0, 1.0)] * 3, [Round([0.1], 1, 0, 1.0)] * 2)


SMALL = ("--rounds", "3", "--concurrency", "2", "--events", "4", "--gap-ms", "2")


def _pooled_row(stdout: str) -> str:
    match = re.search(r"^\s*2\s+gateway/d\s+(.*)$", stdout, re.M)
    assert match is not None, stdout
    return match[1]


def test_saved_runs_report_as_one(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    printed = []
    for path in (first, second):
        done = run_overhead(*SMALL, "--save", str(path))
        assert done.returncode == 0, done.stderr[-2000:]
        assert "targets at 2 streams" in done.stdout and "95% pair" in done.stdout
        printed.append(done.stdout)
    saved = json.loads(first.read_text())
    assert len(saved["levels"]["2"]["direct"]) == 3
    assert len(saved["levels"]["2"]["gateway"]) == 3
    # One run pooled alone reports what it printed when it ran.
    alone = run_overhead("--pool", str(first))
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert _pooled_row(alone.stdout) == _pooled_row(printed[0])
    # Two runs pooled: every round of both, ratios over all of them.
    both = run_overhead("--pool", str(first), str(second))
    assert both.returncode == 0, both.stderr[-2000:]
    assert "rounds per path: 6 at 2 streams" in both.stdout
    assert re.search(r"^\s+gateway\s+[\d.]+\s+-?[\d.]+\s+-?[\d.]+ to -?[\d.]+", both.stdout, re.M)
    runs = [json.loads(p.read_text())["levels"]["2"] for p in (first, second)]
    rounds = {n: [Round(**r) for run in runs for r in run[n]] for n in ("direct", "gateway")}
    # Each run against its own direct rounds, then combined (across_runs).
    labels = [0] * 3 + [1] * 3
    expected = Ratios.of(rounds["gateway"], rounds["direct"], runs=labels).ttft_p50.value
    assert float(_pooled_row(both.stdout).split()[0]) == pytest.approx(expected, abs=5e-4)


def test_a_file_that_is_not_a_saved_run_is_refused_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"levels": {"32": {"direct": [{"ttft": 1}]}}}')
    wrong_type = tmp_path / "wrong_type.json"
    wrong_type.write_text('{"levels": {"32": {"direct": [{"ttft_s": "fast"}]}}}')
    one = {"ttft_s": [0.1], "tokens": 1, "failures": 0, "wall_s": 1.0}
    bad_reasons = tmp_path / "bad_reasons.json"
    bad_reasons.write_text(json.dumps({"levels": {"32": {"direct": [one | {"why": {"x": "2"}}]}}}))
    unpaired = tmp_path / "unpaired.json"
    unpaired.write_text(json.dumps({"levels": {"32": {"direct": [one, one], "gateway": [one]}}}))
    paths = (bad, wrong_type, bad_reasons, unpaired, tmp_path / "missing.json")
    for path in map(str, paths):
        done = run_overhead("--pool", path)
        assert done.returncode != 0 and "not a run saved by --save" in done.stderr
        assert "Traceback" not in done.stderr


def _rounds_at(ttft_s: float, n: int) -> list[Round]:
    return [Round(ttft_s=[ttft_s * (1 + 0.001 * i)] * 5, tokens=100, wall_s=1.0) for i in range(n)]


def test_fitted_ttft_recovers_a_line_and_extrapolates_it() -> None:
    # direct TTFT 50 ms; the proxy at 0, 100 and 300 µs added: 55, 57.5, 62.5 ms.
    direct = _rounds_at(0.050, 12)
    paths = [(0.0, _rounds_at(0.055, 12)), (100.0, _rounds_at(0.0575, 12))]
    paths.append((300.0, _rounds_at(0.0625, 12)))
    assert bootstrap(12, fitted_ttft(paths, direct)).value == pytest.approx(0.05)
    at_minus = bootstrap(12, fitted_ttft(paths, direct, at_us=-100.0))
    assert at_minus.value == pytest.approx(1.05)
    assert at_minus.high - at_minus.low < 1e-9  # the same rounds on every path: no spread


def test_fitted_ttft_interval_widens_with_noise() -> None:
    rng = random.Random(1)
    direct = _rounds_at(0.050, 30)
    noisy = [
        (x, [Round(ttft_s=[t * rng.uniform(0.8, 1.2)] * 5, tokens=100, wall_s=1.0) for t in ts])
        for x, ts in ((x, [0.055 + x * 25e-6] * 30) for x in (0.0, 100.0, 300.0))
    ]
    estimate = bootstrap(30, fitted_ttft(noisy, direct))
    assert estimate.low < estimate.value < estimate.high
    assert estimate.high - estimate.low > 0.005


def test_fitted_ttft_needs_two_amounts_of_cpu() -> None:
    with pytest.raises(ValueError, match="at least two different amounts of CPU"):
        fitted_ttft([(0.0, _rounds_at(0.05, 3)), (0.0, _rounds_at(0.06, 3))], _rounds_at(0.05, 3))


def test_runs_at_different_levels_are_each_compared_with_their_own_direct() -> None:
    """Run A: the path 10 % slower than direct at 1 s; run B: level with direct at 2 s.
    One set of all their streams puts both p50s at 2 s (ratio 1.00); each run against
    its own direct rounds gives 1.10 and 1.00, combined by rounds: sqrt(1.10)."""

    def level(n: int, seconds: float) -> list[Round]:
        return [Round([seconds] * 4, tokens=100, wall_s=seconds) for _ in range(n)]

    direct = level(5, 1.0) + level(5, 2.0)
    path = level(5, 1.1) + level(5, 2.0)
    runs = [0] * 5 + [1] * 5
    assert Ratios.of(path, direct).ttft_p50.value == pytest.approx(1.0)
    combined = Ratios.of(path, direct, runs=runs)
    assert combined.ttft_p50.value == pytest.approx(math.sqrt(1.1))
    assert combined.tokens_per_s.value == pytest.approx(math.sqrt(1 / 1.1))
    # Every resample keeps both runs' rounds, so the interval is the value's.
    assert combined.ttft_p50.low == pytest.approx(math.sqrt(1.1))
    assert combined.ttft_p50.high == pytest.approx(math.sqrt(1.1))
    with pytest.raises(ValueError, match="run labels"):
        Ratios.of(path, direct, runs=runs[:-1])


def test_a_resample_draws_each_runs_rounds_from_that_run() -> None:
    runs = [0] * 3 + [1] * 7
    from_second = bootstrap(10, lambda idx: sum(runs[i] for i in idx), runs=runs)
    assert (from_second.low, from_second.value, from_second.high) == (7, 7, 7)
    unstratified = bootstrap(10, lambda idx: sum(runs[i] for i in idx))
    assert unstratified.low < 7 < unstratified.high
    # One run: the statistic as it is.
    one = [0] * 10
    stat = paired([1.0] * 10)
    assert across_runs(stat, one) is stat and across_runs(stat, None) is stat


def test_pooled_rounds_carry_the_run_they_came_from(tmp_path: Path) -> None:
    one = {"ttft_s": [0.1], "tokens": 1, "failures": 0, "wall_s": 1.0}
    files = []
    for name, n in (("a.json", 2), ("b.json", 1)):
        path = tmp_path / name
        path.write_text(json.dumps({"levels": {"32": {"direct": [one] * n, "gateway": [one] * n}}}))
        files.append(str(path))
    table = load_rounds(files)
    assert [r.run for r in table[32]["direct"]] == [0, 0, 1]
    assert [r.run for r in table[32]["gateway"]] == [0, 0, 1]


def test_a_pooled_row_is_its_runs_figures_combined_as_the_ratios_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two runs whose vLLM ran at different speeds: direct's TTFT 40 ms in one, 160 in
    the other.  A pooled row's figure is the runs' geometric mean weighted by rounds (80
    ms), not a quantile of both runs' streams in one set, so the rows' ratio is the pooled
    ratio printed under them (1.05 here, though the set of all streams would say
    otherwise)."""

    def rounds(ttft_s: float, run: int, rate: float) -> list[Round]:
        return [
            Round(ttft_s=[ttft_s] * 31 + [ttft_s * 1.01], tokens=2048, wall_s=2048 / rate, run=run)
            for _ in range(4)
        ]

    direct = rounds(0.040, 0, 1000.0) + rounds(0.160, 1, 4000.0)
    gateway = rounds(0.042, 0, 950.0) + rounds(0.168, 1, 3800.0)
    ratios = print_level(32, {"direct": direct, "gateway": gateway})
    rows = {
        line.split()[1]: [float(v) for v in line.split()[2:5]]
        for line in capsys.readouterr().out.splitlines()
        if line.split()[:1] == ["32"] and "pair" not in line
    }
    assert rows["direct"] == [80.0, pytest.approx(80.8, abs=0.05), 2000.0]
    assert rows["gateway"] == [84.0, pytest.approx(84.8, abs=0.05), 1900.0]
    assert rows["gateway/d"][0] == pytest.approx(1.05, abs=5e-4)
    assert ratios["gateway"].ttft_p50.value == pytest.approx(84.0 / 80.0)
    assert ratios["gateway"].tokens_per_s.value == pytest.approx(0.95)
