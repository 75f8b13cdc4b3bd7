"""Doc blocks made from real command output (`make docs` writes them; a test compares).

A block is delimited by `<!-- BEGIN name -->` / `<!-- END name -->` and holds a
fenced code block with what the command in BLOCKS printed (README.md keeps an excerpt
of the plan table; docs/budget.md the whole table and the --help text).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PLAN = [sys.executable, "-m", "budget", "plan"]
# The table's lines a new reader needs: what was planned, what vLLM will log, the verdict.
EXCERPT = re.compile(
    r"^(model|hardware|serving|kv_cache|total|usable|KV pool|vLLM will log: GPU|FITS|DOES NOT)"
)


def _whole(text: str) -> str:
    return text


def _excerpt(text: str) -> str:
    lines = text.splitlines()
    kept = [line for line in lines if EXCERPT.match(line)]
    command = lines[lines.index("vllm serve \\") :]
    return "\n".join([*kept, "", *command])


@dataclass(frozen=True)
class Block:
    command: list[str]
    shown: Callable[[str], str] = _whole


BLOCKS: dict[str, Block] = {
    "budget-excerpt": Block(PLAN, _excerpt),
    "budget-table": Block(PLAN),
    "budget-help": Block([*PLAN, "--help"]),
}
FILES: dict[Path, tuple[str, ...]] = {
    README: ("budget-excerpt",),
    ROOT / "docs" / "budget.md": ("budget-table", "budget-help"),
}
_BLOCK_RE = re.compile(
    r"(<!-- BEGIN (?P<name>[\w-]+) -->\n)(?:.*?\n)?(<!-- END (?P=name) -->)", re.S
)


def command_output(name: str) -> str:
    block = BLOCKS[name]
    env_cols = {"COLUMNS": "100", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        block.command, capture_output=True, text=True, cwd=ROOT, env=env_cols, timeout=300
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{block.command} exited {proc.returncode}: {proc.stderr}")
    return block.shown(proc.stdout.rstrip("\n"))


def render(text: str) -> str:
    def block(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in BLOCKS:
            return match.group(0)
        return f"{match.group(1)}```text\n{command_output(name)}\n```\n{match.group(3)}"

    return _BLOCK_RE.sub(block, text)


def main(argv: list[str]) -> int:
    stale = []
    for path in FILES:
        current = path.read_text()
        fresh = render(current)
        if "--write" in argv:
            path.write_text(fresh)
        elif fresh != current:
            stale.append(path.relative_to(ROOT))
    if stale:
        print(f"stale blocks in {', '.join(map(str, stale))}: run `make docs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
