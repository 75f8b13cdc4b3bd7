"""README shows real output: the blocks equal what the commands print now."""

from __future__ import annotations

from tools.readme_blocks import BLOCKS, README, render


def test_readme_blocks_are_current() -> None:
    text = README.read_text()
    for name in BLOCKS:
        assert f"<!-- BEGIN {name} -->" in text, name
    assert render(text) == text, "README.md blocks are stale: run `make docs`"


def test_readme_names_the_ci_test_command() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in README.read_text() and "make test" in ci
