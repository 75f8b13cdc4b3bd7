"""README blocks made from real command output (`make docs` writes them; a test compares).

A block is delimited by `<!-- BEGIN name -->` / `<!-- END name -->` and holds a
fenced code block with what the command in BLOCKS printed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCKS: dict[str, list[str]] = {
    "budget-table": [sys.executable, "-m", "budget", "plan"],
    "budget-help": [sys.executable, "-m", "budget", "plan", "--help"],
}
_BLOCK_RE = re.compile(
    r"(<!-- BEGIN (?P<name>[\w-]+) -->\n)(?:.*?\n)?(<!-- END (?P=name) -->)", re.S
)


def command_output(name: str) -> str:
    env_cols = {"COLUMNS": "100", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        BLOCKS[name], capture_output=True, text=True, cwd=ROOT, env=env_cols, timeout=300
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{BLOCKS[name]} exited {proc.returncode}: {proc.stderr}")
    return proc.stdout.rstrip("\n")


def render(text: str) -> str:
    def block(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in BLOCKS:
            return match.group(0)
        return f"{match.group(1)}```text\n{command_output(name)}\n```\n{match.group(3)}"

    return _BLOCK_RE.sub(block, text)


def main(argv: list[str]) -> int:
    current = README.read_text()
    fresh = render(current)
    if "--write" in argv:
        README.write_text(fresh)
        return 0
    if fresh != current:
        print("README.md blocks are stale: run `make docs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
