"""The server's CPU per stream in the gateway overhead benchmark (`--server-pid`):
read from /proc (bench/schedwait.py `cpu_time`), charged to each round, printed per
path against direct (bench/overhead_report.py `print_server_cpu`) and kept by `--save`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.overhead_report import Round, load_rounds, print_server_cpu, save_rounds
from bench.schedwait import cpu_time
from tests.bench.overhead_cli import run_overhead

STREAMS = 32
# Spins on its own CPU clock for 0.3 s, then sleeps.
SPIN_THEN_SLEEP = (
    "import time\n"
    "t = time.thread_time()\n"
    "while time.thread_time() - t < 0.3: pass\n"
    "print('spun', flush=True)\n"
    "time.sleep(30)\n"
)


@pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="needs Linux schedstat")
def test_cpu_time_counts_what_a_process_ran_not_what_it_slept() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", SPIN_THEN_SLEEP], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "spun\n"
        spun = cpu_time(child.pid)
        time.sleep(0.3)
        slept = cpu_time(child.pid) - spun
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert 0.3 <= spun < 1.5, spun  # the spin and the interpreter's start
    assert slept < 0.02, slept
    assert cpu_time(child.pid) == 0.0  # gone: nothing to read


def _rounds(per_stream_us: float, n: int = 12) -> list[Round]:
    """`n` rounds of 32 streams whose server CPU drifts from round to round (as vLLM's
    does), by the same amount on every path in the same round."""
    return [
        Round(
            ttft_s=[0.05] * STREAMS,
            tokens=64 * STREAMS,
            wall_s=1.0,
            server_cpu_s=(per_stream_us + 40 * (i % 5)) * STREAMS / 1e6,
        )
        for i in range(n)
    ]


def _table(out: str) -> dict[str, list[str]]:
    """The rows of the CPU table: each is indented (the path right-aligned)."""
    rows = []
    for line in out[out.index("vLLM's API server CPU") :].splitlines()[2:]:
        if not line.startswith(" "):
            break
        rows.append(line.split())
    return {row[0]: row[1:] for row in rows}


def test_each_path_is_charged_against_the_direct_round_beside_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    direct = _rounds(8000)
    print_server_cpu(STREAMS, {"direct": direct, "embedded": _rounds(8800), "nginx": direct})
    rows = _table(capsys.readouterr().out)
    assert rows["direct"] == ["8070"]  # the mean: 8,000 plus the drift's 70
    # 800 µs more per stream in every round: no spread; 8,870 / 8,070.
    assert rows["embedded"][:5] == ["8870", "+800", "+800", "to", "+800"]
    assert rows["embedded"][5] == "1.099"
    # A resample's ratio is 1 + 800 / (8,000 + its mean drift, 0 to 160): 1.098-1.100.
    low, high = map(float, rows["embedded"][6].split("-"))
    assert 1.097 <= low <= 1.099 <= high <= 1.100
    assert rows["nginx"][:2] == ["8070", "+0"] and rows["nginx"][5] == "1.000"


def test_no_table_when_a_round_has_no_figure(capsys: pytest.CaptureFixture[str]) -> None:
    direct = _rounds(8000)
    direct[3] = Round(ttft_s=[0.05] * STREAMS, tokens=64 * STREAMS, wall_s=1.0)
    print_server_cpu(STREAMS, {"direct": direct, "embedded": _rounds(8800)})
    assert capsys.readouterr().out == ""


def test_saved_and_pooled_with_the_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = []
    for name, more in (("a.json", 500.0), ("b.json", 1100.0)):
        path = tmp_path / name
        save_rounds(
            str(path), {STREAMS: {"direct": _rounds(8000), "embedded": _rounds(8000 + more)}}, {}
        )
        files.append(str(path))
    table = load_rounds(files)
    assert table[STREAMS]["embedded"][0].server_cpu_s == pytest.approx(8500 * STREAMS / 1e6)
    print_server_cpu(STREAMS, table[STREAMS])
    rows = _table(capsys.readouterr().out)
    # The two runs' rounds, 12 each, 500 and 1,100 µs more.  A resample draws each
    # run's 12 from that run: each keeps its share, so the mean cannot move.
    assert rows["embedded"][1:5] == ["+800", "+800", "to", "+800"]
    wrong = tmp_path / "wrong.json"
    one = {"ttft_s": [0.1], "tokens": 1, "failures": 0, "wall_s": 1.0, "server_cpu_s": "1"}
    wrong.write_text(json.dumps({"levels": {"32": {"direct": [one]}}}))
    done = run_overhead("--pool", str(wrong))
    assert done.returncode != 0 and "not a run saved by --save" in done.stderr


def test_a_pid_that_is_not_a_running_process_is_refused_clearly() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    for pid, why in (
        ("abc", "not a process id"),
        ("0", "not a process id"),
        (str(gone.pid), "no process"),
    ):
        done = run_overhead("--server-pid", pid, timeout=30)
        assert done.returncode != 0 and why in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_live_run_charges_each_round_and_saves_it(tmp_path: Path) -> None:
    """Against the synthetic upstream, charged to this test's own process, which only
    waits meanwhile: the table is printed and every saved round has its figure."""
    saved = tmp_path / "run.json"
    done = run_overhead(
        "--concurrency",
        "2",
        "--rounds",
        "3",
        "--events",
        "4",
        "--gap-ms",
        "1",
        "--server-pid",
        str(os.getpid()),
        "--save",
        str(saved),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _table(done.stdout)
    assert set(rows) == {"direct", "gateway"}, done.stdout
    assert float(rows["direct"][0]) < 2000, done.stdout  # µs a stream: it only waited
    assert re.fullmatch(r"[+-]\d+", rows["gateway"][1]), done.stdout
    assert rows["gateway"][5] == "-" or float(rows["gateway"][5]) >= 0
    levels = json.loads(saved.read_text())["levels"]["2"]
    assert all(isinstance(r["server_cpu_s"], float) for rounds in levels.values() for r in rounds)
