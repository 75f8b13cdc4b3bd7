"""README and the reference docs show real output: the blocks equal what the commands print."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.readme_blocks import FILES, README, render


@pytest.mark.parametrize("path", list(FILES), ids=lambda p: p.name)
def test_doc_blocks_are_current(path: Path) -> None:
    text = path.read_text()
    for name in FILES[path]:
        assert f"<!-- BEGIN {name} -->" in text, name
    assert render(text) == text, f"{path.name} blocks are stale: run `make docs`"


def test_readme_names_the_ci_test_command() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in README.read_text() and "make test" in ci


def test_readme_is_a_first_read() -> None:
    assert len(README.read_text().splitlines()) <= 300
