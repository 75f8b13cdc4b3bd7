"""Where a start's time goes: phases of a stamped entrypoint log (entrypoint.gpu_check's
entrypoint.log).

Each line of such a log starts with the seconds since launch (`+12.34s `). A phase ends
at the first line that matches its mark (the n-th, for marks vLLM prints once for the
model and once for the MTP drafter); its time is the distance from the phase before.
Marks that a log lacks (no warm-up line with SPARKSERVE_WARMUP=off, say) are skipped,
so their time counts toward the next phase found.

    python -m entrypoint.gpu_check.phases LOG...   (a Markdown table, one column per log)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

STAMP = re.compile(r"^\+(\d+(?:\.\d+)?)s (.*)$")


@dataclass(frozen=True)
class Mark:
    label: str
    pattern: re.Pattern[str]
    occurrence: int = 1  # the n-th matching line ends the phase


PRE_FLIGHT = "plan + pre-flight (vLLM's flags read)"
READY = "launch → /ready 200"  # the total: launch to the last phase found

MARKS = (
    Mark(PRE_FLIGHT, re.compile(r"\[sparkserve\] launching vLLM:")),
    Mark("vLLM's API server imports and parses", re.compile(r"non-default args:")),
    Mark("engine process starts", re.compile(r"Initializing a V1 LLM engine")),
    Mark("weights (dummy) and drafter loaded", re.compile(r"Model loading took")),
    Mark("torch.compile, model", re.compile(r"torch\.compile took")),
    Mark("profiling run, model", re.compile(r"Initial profiling/warmup run took")),
    Mark("torch.compile + profiling, MTP drafter", re.compile(r"Initial profiling"), 2),
    Mark("KV cache sized", re.compile(r"\[vllm\] .*KV cache size: [\d,]+ tokens")),
    Mark("CUDA graphs captured", re.compile(r"Graph capturing finished")),
    Mark("API server up, /health 200", re.compile(r"\[sparkserve\] phase: server up")),
    Mark("warm-up (0 when off)", re.compile(r"\[sparkserve\] phase: ready after")),
)
# Figures vLLM and the entrypoint print themselves: (name, pattern with one number).
PRINTED = (
    ("torch.compile, model (s)", re.compile(r"torch\.compile took ([\d.]+) s"), 1),
    ("torch.compile, drafter (s)", re.compile(r"torch\.compile took ([\d.]+) s"), 2),
    ("profiling run, model (s)", re.compile(r"Initial profiling/warmup run took ([\d.]+) s"), 1),
    ("graph capture (s)", re.compile(r"Graph capturing finished in ([\d.]+) secs"), 1),
    ("init engine (s)", re.compile(r"init engine \(.*\) took ([\d.]+) s"), 1),
    ("warm-up (s)", re.compile(r"phase: warm-up done in ([\d.]+) s"), 1),
    ("entrypoint: ready after (s)", re.compile(r"phase: ready after ([\d.]+) s"), 1),
)


def stamped(text: str) -> list[tuple[float, str]]:
    """(seconds since launch, line) for every stamped line."""
    return [(float(m[1]), m[2]) for line in text.splitlines() if (m := STAMP.match(line))]


def find(lines: Sequence[tuple[float, str]], pattern: re.Pattern[str], nth: int) -> int | None:
    """Index of the n-th line matching `pattern`, or None."""
    seen = 0
    for index, (_, line) in enumerate(lines):
        if pattern.search(line):
            seen += 1
            if seen == nth:
                return index
    return None


def phases(lines: Sequence[tuple[float, str]]) -> dict[str, float]:
    """Each phase found → its seconds (phases in MARKS order; a missing one is skipped)."""
    out: dict[str, float] = {}
    last = 0.0
    for mark in MARKS:
        index = find(lines, mark.pattern, mark.occurrence)
        if index is None:
            continue
        at = lines[index][0]
        out[mark.label] = round(at - last, 2)
        last = at
    out[READY] = round(last, 2)
    return out


def printed(lines: Sequence[tuple[float, str]]) -> dict[str, float]:
    out = {}
    for name, pattern, nth in PRINTED:
        index = find(lines, pattern, nth)
        if index is not None:
            match = pattern.search(lines[index][1])
            assert match is not None
            out[name] = float(match[1])
    return out


def table(runs: dict[str, Sequence[tuple[float, str]]]) -> str:
    """Markdown: one row per phase (then the printed figures), one column per run."""
    columns = {name: {**phases(lines), **printed(lines)} for name, lines in runs.items()}
    rows = list(dict.fromkeys(key for values in columns.values() for key in values))
    out = ["| phase (s) | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for row in rows:
        cells = [f"{values[row]:.1f}" if row in values else "—" for values in columns.values()]
        out.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        print("usage: python -m entrypoint.gpu_check.phases LOG...", file=sys.stderr)
        return 2
    stems = [path.stem for path in paths]
    names = [str(p) if stems.count(p.stem) > 1 else p.stem for p in paths]
    print(table({name: stamped(path.read_text()) for name, path in zip(names, paths, strict=True)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
