"""`python -m tools.link_probe`: the fit worked by hand, and two gloo ranks on loopback."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.vllm_proc import free_port
from tools.link_probe import FIT_SIZES, LinkFit, ProbeError, Sample, fit_link, message_sizes

SMALL = [Sample(4, 50e-6), Sample(8, 52e-6), Sample(16, 48e-6), Sample(32, 51e-6)]
MiB = 2**20
# t = 100 µs + bytes / (2·10⁹ B/s): a 2 GB/s slope above a 100 µs floor
LARGE = [Sample(n * MiB, 100e-6 + n * MiB / 2e9) for n in (1, 2, 4, 8)]
FLAGS = re.compile(r"planner flags: --node-link-gbs (\S+) --node-link-latency-us (\S+)$", re.M)


def test_fit_latency_is_the_small_messages_median_and_bandwidth_the_slope() -> None:
    link = fit_link([*LARGE, *SMALL], world_size=2)
    assert link.latency_us == pytest.approx(50.5)  # median of 48, 50, 51, 52
    assert link.gbs == pytest.approx(2.0)  # 2·(2−1)/2 = 1 ÷ slope 1/(2·10⁹)


def test_fit_scales_bandwidth_by_the_ring_factor() -> None:
    # 4 ranks: each sends 2·3/4 of the bytes, so the same times mean a faster link
    assert fit_link([*SMALL, *LARGE], world_size=4).gbs == pytest.approx(3.0)


def test_fit_refuses_flat_timings() -> None:
    flat = [Sample(2**i, 1e-3) for i in range(2, 2 + 2 * FIT_SIZES)]
    with pytest.raises(ProbeError, match="did not take longer"):
        fit_link(flat, world_size=2)


def test_flags_are_what_the_planner_reads() -> None:
    assert LinkFit(gbs=1.23456, latency_us=87.654).planner_flags() == (
        "--node-link-gbs 1.23 --node-link-latency-us 87.7"
    )


def test_message_sizes_are_powers_of_two_in_whole_floats() -> None:
    assert message_sizes(1, 64) == [4, 8, 16, 32, 64]


def probe(*args: str, timeout: float = 120) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tools.link_probe", "--backend", "gloo", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def run_pair(addr: str, extra: tuple[str, ...] = ()) -> str:
    port = str(free_port())
    common = ("--addr", addr, "--port", port, "--max-bytes", "32M", "--iters", "7", *extra)
    ranks = [probe("--rank", str(r), *common) for r in (1, 0)]
    outs = [p.communicate(timeout=120) for p in ranks]
    for p, (_, err) in zip(ranks, outs, strict=True):
        assert p.returncode == 0, err
    return outs[1][0]


def test_two_gloo_ranks_on_loopback_print_flags_the_planner_takes() -> None:
    out = run_pair("127.0.0.1")
    match = FLAGS.search(out)
    assert match, out
    gbs, latency_us = (float(v) for v in match.groups())
    assert gbs > 0.01 and 1 < latency_us < 100_000, out  # loopback: far from either bound
    plan = subprocess.run(
        [sys.executable, "-m", "budget", "plan", "--nodes", "2", "--weights-dtype", "fp8",
         *match.group(0).removeprefix("planner flags: ").split(), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert plan.returncode in (0, 1), plan.stderr
    assert f'"gbs": {gbs}' in plan.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--rank", "2"), "--rank 2: must be below --world-size 2"),
        (("--rank", "0", "--world-size", "1"), "a link needs 2 ranks"),
        (("--rank", "0", "--min-bytes", "8M", "--max-bytes", "1M"), "is above --max-bytes"),
        (("--rank", "0", "--max-bytes", "16"), "more than 4 powers of two"),
        (("--rank", "x"), "argument --rank: 'x': must be an integer"),
    ],
)
def test_bad_input_exits_2_with_the_reason(args: tuple[str, ...], message: str) -> None:
    proc = probe("--addr", "127.0.0.1", *args)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and message in err, err


def test_a_missing_peer_is_one_line_and_exit_1() -> None:
    proc = probe("--rank", "1", "--addr", "127.0.0.1", "--port", str(free_port()),
                 "--timeout-s", "2")  # fmt: skip
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert err.startswith("link_probe: rank 1: no rendezvous at 127.0.0.1:"), err
    assert "Traceback" not in err
