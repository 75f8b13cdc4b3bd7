"""The CI version of the reliability suite: one vLLM start through the entrypoint (plus the
restart of the kill case), every case must PASS (WARN/SKIP are report-only), < 4 minutes.

Run it under `flock /tmp/sparkserve-vllm-test.lock` where other vLLM runs may compete.
"""

from __future__ import annotations

import pytest

from reliability.report import FAIL, render_table
from reliability.suite import run

CI_LIMIT_SECONDS = 240.0


@pytest.mark.vllm
def test_short_suite_passes_every_case_in_under_four_minutes(tmp_path):
    results, meta = run(short=True, out_dir=tmp_path / "reliability", warmup=False)
    table = render_table(results)
    print(table)
    assert not [r for r in results if r.verdict == FAIL], table
    assert meta.total_seconds < CI_LIMIT_SECONDS, f"{meta.total_seconds:.0f} s\n{table}"
