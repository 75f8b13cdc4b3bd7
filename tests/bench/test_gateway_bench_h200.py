"""The gateway's overhead on an H200 (tests/bench/fixtures/gateway_bench_h200/), judged
with today's per-phase targets by `bench.gateway_bench`'s own verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.gateway_bench import parser, targets
from tests.bench.bench_tables import table_rows

FIXTURE = Path(__file__).parent / "fixtures" / "gateway_bench_h200"


def _rows(name: str) -> dict[tuple[int, str, str], dict[str, object]]:
    return table_rows(FIXTURE / name)


def test_the_tables_hold_every_path_at_every_level() -> None:
    assert set(_rows("p3_60rounds_32streams.txt")) == {
        (32, phase, path) for phase in ("standalone", "embedded") for path in ("direct", phase)
    }
    assert {k[0] for k in _rows("p3_20rounds.txt")} == {1, 8, 32}


@pytest.mark.parametrize(
    ("phase", "added_ms", "verdicts"),
    [
        # 55.0 against 50.7 ms; interval [1.049, 1.120] above 1.03 entirely.
        ("standalone", 4.3, {"ttft_p50": "missed", "ttft_p99": "undecided", "tokens_per_s": "met"}),
        # 48.3 against 45.8 ms; [1.021, 1.094] above 1.02 entirely.
        ("embedded", 2.5, {"ttft_p50": "missed", "ttft_p99": "undecided", "tokens_per_s": "met"}),
    ],
)
def test_at_32_streams_and_60_rounds_both_faces_miss_their_ttft_target(
    phase: str, added_ms: float, verdicts: dict[str, str]
) -> None:
    rows = _rows("p3_60rounds_32streams.txt")
    gateway, direct = rows[(32, phase, phase)], rows[(32, phase, "direct")]
    added = float(gateway["ttft_p50_ms"]) - float(direct["ttft_p50_ms"])  # type: ignore[arg-type]
    assert added == pytest.approx(added_ms, abs=0.05)
    goal = targets(parser().parse_args([]), phase)
    ratios: dict[str, tuple[float, float, float]] = gateway["ratios"]  # type: ignore[assignment]
    got = {m: goal[m].verdict(low, high) for m, (_value, low, high) in ratios.items()}
    assert got == verdicts
