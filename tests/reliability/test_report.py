"""The table, Markdown and JSON renderings of case results."""

from __future__ import annotations

import json

import pytest

from reliability.report import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    CaseResult,
    RunMeta,
    all_passed,
    render_json,
    render_markdown,
    render_table,
    summary_line,
)

META = RunMeta("2026-01-02 03:04 UTC", "box (cpu, 2 cores)", "short", "0.32.0", 181.4)


def results() -> list[CaseResult]:
    return [
        CaseResult("load", "ramp-1-32", "TTFT p50/95/99 10/20/30 ms", PASS),
        CaseResult("hostile", "hostile-input", "30/31 as required", FAIL, "lone-surrogate → 500"),
        CaseResult("deps", "pip-audit", "offline", SKIP, "no network"),
        CaseResult("deps", "dockerfile-non-root", "vllm: root", WARN, "vllm runs as root"),
    ]


def test_a_verdict_outside_the_four_is_refused():
    with pytest.raises(ValueError, match="verdict='OK'; must be one of PASS, FAIL, WARN, SKIP"):
        CaseResult("g", "n", "f", "OK")


def test_warn_and_skip_do_not_fail_the_run_but_fail_does():
    assert not all_passed(results())
    assert all_passed([r for r in results() if r.verdict != FAIL])


def test_summary_counts_each_verdict():
    assert summary_line(results()) == "4 cases: 1 PASS, 1 FAIL, 1 WARN, 1 SKIP"


def test_table_has_one_row_per_case_with_its_verdict_and_the_details_of_non_passes():
    table = render_table(results()).splitlines()
    rows = [line for line in table if line.startswith(("load/", "hostile/", "deps/"))]
    assert [row.split()[-1] for row in rows] == [PASS, FAIL, SKIP, WARN]
    assert "  hostile/hostile-input: lone-surrogate → 500" in table
    assert not any("ramp-1-32:" in line for line in table)  # a PASS has no detail line
    assert table[-1] == summary_line(results())


def test_table_clips_long_figures_to_keep_the_verdict_column():
    long = CaseResult("g", "n", "x" * 500, PASS)
    row = render_table([long]).splitlines()[2]
    assert row.endswith("PASS") and "…" in row


def test_markdown_names_date_machine_and_escapes_pipes():
    text = render_markdown([CaseResult("g", "n", "a | b", PASS)], META)
    assert text.startswith("Measured 2026-01-02 03:04 UTC on box (cpu, 2 cores); mode `short`")
    assert "| g/n | a \\| b | PASS |" in text


def test_markdown_appends_the_detail_of_a_failure_to_its_figure():
    assert "| hostile/hostile-input | 30/31 as required — lone-surrogate → 500 | FAIL |" in (
        render_markdown(results(), META)
    )


def test_json_carries_meta_verdicts_and_counts():
    payload = json.loads(render_json(results(), META))
    assert payload["passed"] is False
    assert payload["counts"] == {PASS: 1, FAIL: 1, WARN: 1, SKIP: 1}
    assert payload["meta"]["machine"] == "box (cpu, 2 cores)"
    assert [c["verdict"] for c in payload["cases"]] == [PASS, FAIL, SKIP, WARN]
