"""`python -m entrypoint.gpu_check.starts`: its refusals in words, and a start whose host
was never quiet (the recorded H200 starts; the full summary is replayed in
test_gpu_check_h200.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from entrypoint.gpu_check.phases import PRE_FLIGHT, READY
from entrypoint.gpu_check.starts import main
from tests.entrypoint.test_gpu_check_h200 import steady_ratios, worst

H200 = Path(__file__).parent / "fixtures" / "gpu_h200_check"


def test_one_noisy_start_says_no_start_was_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    """2026-12-04's warm 3: its row holds what that check recorded (its phases and its own
    first-request summary) and, as the spread, its slowest steady round against the
    median of the other steady rounds of its shape, worked out here."""
    report = json.loads((H200 / "warm3" / "report.json").read_text())
    assert main([str(H200 / "warm3")]) == 0
    out = capsys.readouterr().out
    row = out.splitlines()[2].replace("**", "")
    phases = report["startup_phases_seconds"]
    assert row.startswith(f"| warm3 | {phases[READY]:.1f} s | {phases[PRE_FLIGHT]:.1f} s |")
    for shape in report["first_request_summary"]:
        assert f"| {shape['ttft_ratio']:.2f}× ({shape['gap_ratio']:.2f}×) |" in row
    rounds = report["first_request"]["rounds"]
    spread = max(
        ratio
        for name in ("chat", "long_prompt", "decode_x4")
        for key in ("ttft", "gaps")
        for ratio in steady_ratios([worst(r["streams"], key) for r in rounds if r["shape"] == name])
    )
    assert spread > 1.2 and row.endswith(f"| {spread:.2f}× |")
    assert "met in 0 of 1 starts" in out
    assert "No quiet start: every start has a steady round over 1.2× of its peers" in out


def test_folders_of_one_name_are_told_apart_by_their_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for day in ("a", "b"):
        shutil.copytree(H200 / "warm1", tmp_path / day / "warm1")
    assert main([str(tmp_path / "a" / "warm1"), str(tmp_path / "b" / "warm1")]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "warm1 |" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| a/warm1", "| b/warm1"]


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "report.json: No such file or directory; give the --out folder of a check"),
        ("{", "report.json: not JSON (Expecting property name"),
        (json.dumps({"first_request": None}), "report.json: no first-request rounds"),
        (
            json.dumps({"first_request": {"label": "x", "rounds": [{"shape": "chat"}]}}),
            "report.json: its rounds are not a check's (KeyError('seconds_after_ready') in them)",
        ),
        (
            json.dumps(
                {
                    "first_request": {
                        "label": "x",
                        "rounds": [
                            {
                                "shape": "chat",
                                "seconds_after_ready": 0.0,
                                "streams": [
                                    {"ttft_seconds": 0.1, "gaps_seconds": [0.01], "tokens": 2}
                                ],
                            },
                        ],
                    }
                }
            ),
            "report.json: no shape has a steady round after its first",
        ),
    ],
)
def test_a_folder_without_a_usable_report_is_refused_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, said: str
) -> None:
    if content is not None:
        (tmp_path / "report.json").write_text(content)
    assert main([str(H200 / "cold"), str(tmp_path)]) == 2
    err = capsys.readouterr()
    assert f"sparkserve: error: {tmp_path}/{said}" in err.err
    assert err.out == ""


def test_no_folder_prints_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: python -m entrypoint.gpu_check.starts OUT..." in capsys.readouterr().err


def test_one_steady_round_a_shape_has_no_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = {"ttft_seconds": 0.1, "gaps_seconds": [0.01, 0.01], "tokens": 3}
    rounds = [{"shape": "chat", "seconds_after_ready": t, "streams": [stream]} for t in (0.0, 1.0)]
    (tmp_path / "report.json").write_text(
        json.dumps({"first_request": {"label": "x", "rounds": rounds}})
    )
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"| {tmp_path.name} | – | – | 1.00× (1.00×) | – |" in out
    assert "- No steady spread: a shape needs two steady rounds or more" in out
    assert "of a steady round against its peers: –" in out


def test_help_prints_what_it_reads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "python -m entrypoint.gpu_check.starts OUT..." in capsys.readouterr().out
