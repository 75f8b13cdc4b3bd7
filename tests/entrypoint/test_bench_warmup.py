"""The warm-up benchmark's arguments and table (the benchmark itself is run by hand)."""

import pytest

from tools.bench_warmup import RunResult, parse_args, prompt, render_table


def test_defaults_and_bad_counts():
    args = parse_args([])
    assert (args.requests, args.prompt_words, args.max_tokens) == (10, 300, 8)
    with pytest.raises(SystemExit):
        parse_args(["--requests", "0"])


def test_table_puts_both_runs_side_by_side():
    results = [
        RunResult(True, 61.0, 0.110, [0.100, 0.120, 0.090]),
        RunResult(False, 58.5, 0.900, [0.100, 0.110, 0.095]),
    ]
    lines = render_table(results).splitlines()
    assert "steady TTFT (median of 3)" in lines[0] and "first TTFT" in lines[0]
    assert lines[2].split() == ["on", "61.0", "s", "110.0", "ms", "100.0", "ms", "1.10x"]
    assert lines[3].split() == ["off", "58.5", "s", "900.0", "ms", "100.0", "ms", "9.00x"]


def test_prompts_differ_from_their_first_words():
    assert prompt(1, 5).split()[:2] != prompt(2, 5).split()[:2]
    assert len(prompt(1, 5).split()) == 2 + 5
