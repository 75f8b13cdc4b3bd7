"""bench/cpu_priority.py without vLLM: its arguments, run-queue reading and table."""

from __future__ import annotations

import os

import pytest

from bench.cpu_priority import Cell, Stream, main, table
from bench.schedwait import run_queue_wait


@pytest.mark.parametrize(
    "argv",
    [["--nice", "0"], ["--nice", "20"], ["--rounds", "0"], ["--tokens", "1"], ["--tokens", "5000"]],
)
def test_bad_arguments_are_refused_before_anything_starts(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_run_queue_wait_is_read_for_every_thread() -> None:
    assert run_queue_wait(os.getpid()) >= 0.0
    assert run_queue_wait(2**22 + 12345) == 0.0  # no such process: nothing waited


def test_the_table_has_one_row_per_setting_and_path_with_its_shares() -> None:
    starved = Cell([Stream(0.5, 3.0, 4.0), Stream(1.5, 2.0, 4.0)], wall=4.0, client_wait=3.0)
    fed = Cell([Stream(0.01, 0.02, 4.2)], wall=4.2, client_wait=0.042, gateway_wait=0.084)
    text = table({(0, "direct"): starved, (10, "gateway"): fed})
    rows = text.splitlines()[2:4]
    assert rows[0].split()[:3] == ["nice", "0", "direct"]
    assert "75%" in rows[0].split() and rows[0].split()[-2] == "-"  # no gateway on this path
    assert rows[1].split()[:3] == ["nice", "10", "gateway"]
    assert "1%" in rows[1].split() and "2%" in rows[1].split()
