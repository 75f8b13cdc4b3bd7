"""Runs read as draws of their own (bench/overhead_stats.py `between_runs`) and the
run-by-run table `--pool` prints with it (bench/overhead_report.py)."""

from __future__ import annotations

import math
import random

import pytest

from bench.overhead_report import Round, print_between_runs
from bench.overhead_stats import T975, Z975, Estimate, between_runs, t975


def _t_cdf(x: float, df: int, steps: int = 20_000) -> float:
    """P(T <= x) for x >= 0: 1/2 plus Simpson's rule over Student's t density."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    h = x / steps
    total = 0.0
    for i in range(steps + 1):
        weight = 1 if i in (0, steps) else 4 if i % 2 else 2
        total += weight * c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2)
    return 0.5 + total * h / 3


@pytest.mark.parametrize("df", range(1, len(T975) + 1))
def test_each_t_quantile_is_the_distributions(df: int) -> None:
    assert _t_cdf(t975(df), df) == pytest.approx(0.975, abs=2e-4)


def test_past_the_table_the_normal_quantile_and_no_degrees_refused() -> None:
    assert t975(len(T975) + 1) == Z975 and t975(1000) == Z975
    with pytest.raises(ValueError, match="at least 1"):
        t975(0)


def _run(log_ratio: float, se: float) -> Estimate:
    return Estimate(
        math.exp(log_ratio), math.exp(log_ratio - Z975 * se), math.exp(log_ratio + Z975 * se)
    )


def test_runs_that_agree_add_no_between_run_scatter() -> None:
    """Four runs at the same ratio, each ±se: no scatter beyond the rounds, so the
    interval is the four runs' combined one (se/2), with t on 3 degrees of freedom."""
    se = 0.01
    b = between_runs([_run(math.log(1.04), se)] * 4)
    assert b is not None
    assert (b.runs, b.q, b.i2, b.tau) == (4, pytest.approx(0.0), 0.0, 0.0)
    assert b.pooled.value == pytest.approx(1.04)
    assert math.log(b.pooled.high / b.pooled.value) == pytest.approx(t975(3) * se / 2)


def test_two_runs_far_apart_give_a_between_run_deviation_and_a_wide_interval() -> None:
    """Runs at log ratios 0 and d, each ±se: Q = d²/(2 se²), and tau² = d²/2 − se²
    (DerSimonian-Laird with two equal weights, worked by hand)."""
    se, d = 0.005, math.log(1.10)
    b = between_runs([_run(0.0, se), _run(d, se)])
    assert b is not None
    assert b.q == pytest.approx(d * d / (2 * se * se), rel=1e-3)
    assert b.tau == pytest.approx(math.sqrt(d * d / 2 - se * se), rel=1e-3)
    assert b.i2 > 0.99
    assert b.pooled.value == pytest.approx(math.exp(d / 2), rel=1e-6)
    # Two draws 10 % apart say little about where runs centre: t on one degree of freedom.
    assert b.pooled.low < 1.0 and b.pooled.high > 1.10


def test_the_interval_covers_the_centre_of_runs_about_as_often_as_it_says() -> None:
    """Simulated runs scattered around 1.05 by a between-run deviation as large as each
    run's own error (as the VM's runs did), and by none."""
    rng = random.Random(11)
    centre = math.log(1.05)
    for tau in (0.0, 0.01):
        covered, trials = 0, 600
        for _ in range(trials):
            runs = []
            for _ in range(6):
                se = 0.01 * rng.uniform(0.7, 1.3)
                runs.append(_run(rng.gauss(centre, math.hypot(tau, se)), se))
            b = between_runs(runs)
            assert b is not None
            covered += b.pooled.low <= 1.05 <= b.pooled.high
        assert 0.92 * trials <= covered <= 0.995 * trials, (tau, covered)


def test_a_run_without_an_interval_gives_no_reading() -> None:
    good = _run(0.0, 0.01)
    assert between_runs([good]) is None
    assert between_runs([good, Estimate(1.0, 1.0, 1.0)]) is None
    assert between_runs([good, Estimate(1.0, float("nan"), 1.1)]) is None
    assert between_runs([good, Estimate(1.0, 0.0, 1.1)]) is None


def test_the_pool_prints_each_run_and_the_runs_as_draws(capsys: pytest.CaptureFixture) -> None:
    """Three runs, the path 2 %, 5 % and 8 % slower than the direct rounds beside it: each
    run's row says its own ratio, and between runs the scatter is far beyond the rounds'."""
    rng = random.Random(5)

    def rounds(run: int, scale: float) -> list[Round]:
        out = []
        for _ in range(20):
            ttfts = [0.08 * scale * rng.lognormvariate(0, 0.01) for _ in range(32)]
            out.append(Round(ttft_s=ttfts, tokens=2048, wall_s=1.0 * scale, run=run))
        return out

    direct = rounds(0, 1.0) + rounds(1, 1.0) + rounds(2, 1.0)
    path = rounds(0, 1.02) + rounds(1, 1.05) + rounds(2, 1.08)
    print_between_runs(32, {"direct": direct, "embedded": path})
    out = capsys.readouterr().out
    rows = [r for line in out.splitlines() if (r := line.split())[:1] == ["embedded"]]
    rows = [r for r in rows if r[1].isdigit()]  # the run rows, not the between-run lines
    assert [(r[1], r[2]) for r in rows] == [("1", "20"), ("2", "20"), ("3", "20")]
    assert [float(r[3]) for r in rows] == [
        pytest.approx(1.02, abs=0.01),
        pytest.approx(1.05, abs=0.01),
        pytest.approx(1.08, abs=0.01),
    ]
    p50 = next(line for line in out.splitlines() if "ttft p50 <= 1.05x" in line)
    assert "undecided" in p50 and float(p50.split("I2 ")[1].split("%")[0]) > 90
    # One run: nothing to read between runs.
    print_between_runs(32, {"direct": rounds(0, 1.0), "embedded": rounds(0, 1.02)})
    assert capsys.readouterr().out == ""
