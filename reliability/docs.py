"""Put the measured table between its markers in a Markdown file (docs/reliability.md
through `make reliability`)."""

from __future__ import annotations

from pathlib import Path

BEGIN = "<!-- BEGIN reliability-table -->"
END = "<!-- END reliability-table -->"


class DocsError(Exception):
    """The target file has no (or a broken) reliability block."""


def replace_block(text: str, table: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise DocsError(f"no {BEGIN} … {END} block")
    return text[: start + len(BEGIN)] + "\n" + table.rstrip("\n") + "\n" + text[end:]


def write_docs(path: Path, table: str) -> None:
    path.write_text(replace_block(path.read_text(), table))
