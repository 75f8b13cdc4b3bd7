"""The burst's anatomy in the gateway overhead benchmark (bench/overhead_stats.py
`waves`, `Burst`, `fitted_first_delay`; bench/overhead_report.py `print_burst`)."""

from __future__ import annotations

import math

import pytest

from bench.overhead_report import Round, print_burst, spin_name
from bench.overhead_stats import (
    Burst,
    bootstrap,
    first_token_delays,
    fitted_first_delay,
    p50_late_share,
    waves,
)

STREAMS = 32


def _burst(first_s: float, second: int, gap_s: float = 0.018) -> list[float]:
    """A 32-stream burst as vLLM serves it: one stream alone at `first_s`, `second`
    streams 0.2 ms apart one step later, the rest one more step on."""
    out = [first_s]
    out += [first_s + gap_s + 0.0002 * i for i in range(second)]
    out += [first_s + 2 * gap_s + 0.0002 * i for i in range(STREAMS - 1 - second)]
    return out


def _rounds(first_s: float, second: int, n: int = 8) -> list[Round]:
    # Each round's whole burst a little later than the one before: rounds differ.
    return [
        Round(ttft_s=[t + 0.001 * i for t in _burst(first_s, second)], tokens=64, wall_s=1.0)
        for i in range(n)
    ]


def test_waves_split_where_first_tokens_stop_coming_close_together() -> None:
    ttft = [0.0702, 0.050, 0.0706, 0.0704, 0.095, 0.0952]  # unsorted, as streams finish
    assert waves(ttft) == [0, 1, 1, 1, 2, 2]
    assert waves([0.050, 0.0541, 0.0582], gap_s=0.004) == [0, 1, 2]
    assert waves([0.050, 0.0539, 0.0578], gap_s=0.004) == [0, 0, 0]  # close pairs chain
    assert waves([]) == []


def test_the_p50_stream_is_late_when_the_second_wave_holds_less_than_half() -> None:
    # p50 is the 17th of 32 streams: the second wave must hold 16 for it to be there.
    assert p50_late_share(_rounds(0.05, second=16)) == 0.0
    assert p50_late_share(_rounds(0.05, second=15)) == 1.0
    mixed = _rounds(0.05, second=20, n=3) + _rounds(0.05, second=10, n=1)
    assert p50_late_share(mixed) == 0.25
    assert math.isnan(p50_late_share([Round()]))


def test_the_first_tokens_delay_is_paired_round_by_round() -> None:
    direct = _rounds(0.050, second=16)
    path = _rounds(0.0532, second=14)  # 3.2 ms later in every round
    delays = first_token_delays(path, direct)
    assert delays == pytest.approx([0.0032] * 8)
    burst = Burst.of(path, direct)
    assert burst.delay_s is not None and burst.delay_s.value == pytest.approx(0.0032)
    assert burst.first_s == pytest.approx(0.0532 + 0.004)  # median round: the 5th of 8
    assert burst.p50_late == 1.0
    assert Burst.of(direct, None).delay_s is None
    empty = first_token_delays([Round()], [Round(ttft_s=[0.05])])
    assert math.isnan(empty[0])
    with pytest.raises(ValueError, match="not paired"):
        Burst.of(path[:3], direct)


def test_the_line_through_spinning_copies_reads_off_the_paths_own_time() -> None:
    # Each µs spun per request delays the first token by 1 µs per stream: 32 µs in all.
    # The path itself delays it 2.56 ms: as much as 80 µs spun per request.
    direct = _rounds(0.050, second=16)
    paths = [
        (us, _rounds(0.050 + STREAMS * (80 + us) * 1e-6, second=16)) for us in (0.0, 100.0, 300.0)
    ]
    per_us = bootstrap(8, fitted_first_delay(paths, direct, own=False))
    own = bootstrap(8, fitted_first_delay(paths, direct, own=True))
    assert per_us.value == pytest.approx(32.0)
    assert own.value == pytest.approx(80.0)
    with pytest.raises(ValueError, match="the path at 0"):
        fitted_first_delay(paths[1:], direct, own=True)


def test_the_burst_table_prints_each_path_against_direct(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = {
        "direct": _rounds(0.050, second=16),
        "embedded": _rounds(0.0532, second=12),  # 3.2 ms: 100 µs per stream
        spin_name(100, embedded=True): _rounds(0.050 + STREAMS * 200e-6, second=10),
        spin_name(300, embedded=True): _rounds(0.050 + STREAMS * 400e-6, second=8),
        "nginx": _rounds(0.0503, second=16),
    }
    print_burst(STREAMS, results)
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line[:1] == " "}
    assert rows["direct"] == ["54.0", "0%"]
    assert rows["embedded"][:2] == ["57.2", "3.20"] and rows["embedded"][-2:] == ["100", "100%"]
    assert rows["nginx"][-2:] == ["9", "0%"]
    # Each copy spins 100 µs more per request: 3.2 ms more, 1 µs per stream; embedded's
    # own 3.2 ms is what 100 µs spun per request would cost.
    assert "delays the first token by 1.00 us per stream" in out
    assert "embedded's own delay is that of 100 us spun per request" in out


def test_no_line_without_spinning_copies(capsys: pytest.CaptureFixture[str]) -> None:
    print_burst(STREAMS, {"direct": _rounds(0.05, 16), "gateway": _rounds(0.051, 16)})
    out = capsys.readouterr().out
    assert "gateway" in out and "the line through" not in out
