"""The generated parts of docs/entrypoint.md: the settings table and the real --help.

python -m devtools.entrypoint_docs --write   # regenerate the blocks in docs/entrypoint.md
python -m devtools.entrypoint_docs           # exit 1 when the file has drifted (tests call this)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from entrypoint.cli import build_parser, shown_default
from entrypoint.config import OPTIONS

DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "entrypoint.md"
BLOCK = re.compile(r"(<!-- BEGIN (?P<name>[\w-]+) -->\n).*?(<!-- END (?P=name) -->)", re.DOTALL)


def settings_table() -> str:
    rows = ["| Variable | Flag | Default | Meaning |", "|---|---|---|---|"]
    for option in OPTIONS:
        text = option.help.replace("|", "\\|")
        rows.append(f"| `{option.env}` | `{option.flag}` | {shown_default(option)} | {text} |")
    return "\n".join(rows)


def help_text() -> str:
    return "```text\n" + build_parser().format_help().rstrip() + "\n```"


def blocks() -> dict[str, str]:
    return {"settings-table": settings_table(), "entrypoint-help": help_text()}


def regenerate(text: str) -> str:
    generated = blocks()
    return BLOCK.sub(lambda m: m[1] + generated[m["name"]] + "\n" + m[3], text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.entrypoint_docs")
    parser.add_argument("--write", action="store_true", help="rewrite the generated blocks")
    args = parser.parse_args(argv)
    current = DOC_PATH.read_text()
    fresh = regenerate(current)
    if args.write:
        DOC_PATH.write_text(fresh)
        return 0
    if fresh != current:
        print(f"{DOC_PATH} is out of date: run python -m devtools.entrypoint_docs --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
