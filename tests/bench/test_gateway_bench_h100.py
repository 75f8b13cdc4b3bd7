"""The gateway's overhead on an H100 (tests/bench/fixtures/gateway_bench_h100/): one
gateway process against several workers, judged by `bench.gateway_bench`'s own verdicts
with today's per-phase targets."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from bench.gateway_bench import parser, targets
from tests.bench.bench_tables import table_rows

FIXTURE = Path(__file__).parent / "fixtures" / "gateway_bench_h100"
ONE_PROCESS = ("a_one_process.txt", "b_one_process.txt", "c_one_process.txt")
WORKERS = ("c_gateway_workers_8.txt", "d_gateway_workers_8.txt")
# Raced in turn on one vLLM: (this gateway, 986ba87's).
RACED = (
    ("e_new_one_process.txt", "e_old_one_process.txt"),
    ("f_new_one_process.txt", "f_old_one_process.txt"),
)


def added_ms(name: str, phase: str = "standalone", streams: int = 32) -> float:
    rows = table_rows(FIXTURE / name)
    gateway, direct = rows[(streams, phase, phase)], rows[(streams, phase, "direct")]
    return float(gateway["ttft_p50_ms"]) - float(direct["ttft_p50_ms"])


def verdicts(name: str, phase: str = "standalone") -> dict[str, str]:
    goal = targets(parser().parse_args([]), phase)
    ratios = table_rows(FIXTURE / name)[(32, phase, phase)]["ratios"]
    return {m: goal[m].verdict(low, high) for m, (_value, low, high) in ratios.items()}


def test_every_run_holds_its_paths() -> None:
    raced = [name for pair in RACED for name in pair]
    for name in (*ONE_PROCESS, *WORKERS, "b_uvicorn_workers_8.txt", *raced):
        rows = table_rows(FIXTURE / name)
        assert {(32, "standalone", "direct"), (32, "standalone", "standalone")} <= set(rows), name
    for name in ("a_one_process.txt", "c_gateway_workers_8.txt"):
        assert (32, "embedded", "embedded") in table_rows(FIXTURE / name)
    low = table_rows(FIXTURE / "d_gateway_workers_8_low.txt")
    assert {k[0] for k in low} == {1, 8}


@pytest.mark.parametrize("name", ONE_PROCESS)
def test_one_process_misses_the_standalone_target_in_every_run(name: str) -> None:
    assert verdicts(name)["ttft_p50"] == "missed"
    assert verdicts(name)["tokens_per_s"] == "met"
    assert 3.7 <= added_ms(name) <= 4.3


def test_workers_that_share_nothing_add_least() -> None:
    """The diagnosis: eight uvicorn workers, each with its own state, add under a
    fifth of what one process, right after on the same vLLM, adds; and less than
    `GATEWAY_WORKERS`, whose parent they do not ask."""
    nothing_shared = added_ms("b_uvicorn_workers_8.txt")
    assert nothing_shared < added_ms("b_one_process.txt") / 5
    assert nothing_shared < min(added_ms(name) for name in WORKERS)


@pytest.mark.parametrize("name", WORKERS)
def test_gateway_workers_add_less_than_any_one_process_run(name: str) -> None:
    assert verdicts(name)["ttft_p50"] == "undecided"  # neither met nor missed in 60 rounds
    assert verdicts(name)["tokens_per_s"] == "met"
    assert added_ms(name) < min(added_ms(one) for one in ONE_PROCESS)


def test_side_by_side_eight_workers_beat_one_process() -> None:
    """The same two vLLMs, the workers' bench then one process's: the workers' ratio
    lies below the whole of one process's interval."""
    workers = table_rows(FIXTURE / "c_gateway_workers_8.txt")[(32, "standalone", "standalone")]
    one = table_rows(FIXTURE / "c_one_process.txt")[(32, "standalone", "standalone")]
    _one_value, one_low, _one_high = one["ratios"]["ttft_p50"]
    assert workers["ratios"]["ttft_p50"][0] < one_low
    assert added_ms("c_gateway_workers_8.txt") < added_ms("c_one_process.txt") / 2


@pytest.mark.parametrize("name", ["a_one_process.txt", "c_gateway_workers_8.txt"])
def test_the_embedded_gateway_is_undecided_on_the_h100(name: str) -> None:
    assert verdicts(name, "embedded")["ttft_p50"] == "undecided"
    assert verdicts(name, "embedded")["tokens_per_s"] == "met"
    assert 1.5 <= added_ms(name, "embedded") <= 2.0


@pytest.mark.parametrize(("new", "old"), RACED)
def test_the_per_request_cuts_do_not_resolve_on_the_h100_ttft(new: str, old: str) -> None:
    """Raced in turn on the same vLLM, today's gateway and 986ba87's have overlapping
    intervals; neither meets the standalone target."""
    new_ratio = table_rows(FIXTURE / new)[(32, "standalone", "standalone")]["ratios"]
    old_ratio = table_rows(FIXTURE / old)[(32, "standalone", "standalone")]["ratios"]
    (_n, new_low, new_high), (_o, old_low, old_high) = new_ratio["ttft_p50"], old_ratio["ttft_p50"]
    assert max(new_low, old_low) <= min(new_high, old_high)
    for name in (new, old):
        assert verdicts(name)["ttft_p50"] in ("missed", "undecided")
        assert verdicts(name)["tokens_per_s"] == "met"


def cpu_runs(name: str) -> tuple[list[float], list[float]]:
    """The CPU ms per request of each run: (986ba87's, this checkout's)."""
    rows = {}
    for line in (FIXTURE / name).read_text().splitlines():
        if line.startswith(("| baseline (", "| this checkout |")):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].split(" ")[0]] = [float(v) for v in cells[2].split(",")]
    return rows["baseline"], rows["this"]


def test_on_the_h100_host_a_stream_read_at_once_costs_less_but_not_half() -> None:
    old, new = cpu_runs("f_cpu_at_once.txt")
    assert len(old) == len(new) == 7
    assert max(new) < min(old)
    assert statistics.median(new) / statistics.median(old) > 0.5  # not halved


def test_on_the_h100_host_a_paced_stream_costs_the_same_as_before() -> None:
    """Event by event, the cost is the loop's and the libraries' (docs/gateway.md)."""
    old, new = cpu_runs("f_cpu_paced.txt")
    assert min(new) <= max(old) and min(old) <= max(new)  # the runs' ranges overlap
