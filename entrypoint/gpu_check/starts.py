"""The first request over several starts: did each one meet the target, and is the host
quiet enough to tell?

`python -m entrypoint.gpu_check` measures one start. The first-request target (warm-up
on: first ≤ 1.2× steady, TTFT and first gaps, on every shape) is a claim about every
start, cold and warm, so it needs several; and one start's ratio only means something
against how much the host moves rounds with nothing first about them. Given the
`--out` folders of several checks, this prints:

- one row per start: launch → `/ready`, the pre-flight, each shape's first-round ratio
  (TTFT, and the first gaps in brackets), and the start's steady spread (the worst of
  its steady rounds against the median of its other steady rounds, every shape);
- how many starts met the target on every shape;
- how often a first round exceeded 1.2× of its steady median, beside how often a steady
  round exceeded 1.2× of the median of the other steady rounds, and the median of each
  kind of ratio (the typical first-request cost, apart from the outliers);
- the quiet starts (every steady round within 1.2× of its peers) and how their first
  rounds fared: where the host's own spread is inside the target, a first round over it
  is a first-request cost, not the host.

    python -m entrypoint.gpu_check.starts OUT...   (each OUT holds a check's report.json)

Exit 0 when every folder was read; 2 when one holds no readable report or no rounds.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from entrypoint.gpu_check.first_request import (
    Run,
    ShapeSummary,
    peer_ratios,
    run_from_dict,
    summarise,
)
from entrypoint.gpu_check.phases import PRE_FLIGHT, READY
from entrypoint.gpu_check.report import FIRST_REQUEST_TARGET as TARGET


class StartsError(ValueError):
    """A folder this summary cannot read, said in words."""


@dataclass(frozen=True)
class Start:
    name: str
    phases: dict[str, float]
    shapes: list[ShapeSummary]
    steady: list[float]  # every steady round's ratio to its peers, TTFT and gaps, all shapes

    @property
    def firsts(self) -> list[float]:
        return [r for s in self.shapes for r in (s.ttft_ratio, s.gap_ratio)]

    @property
    def met(self) -> bool:
        return all(r <= TARGET for r in self.firsts)

    @property
    def spread(self) -> float:
        return max(self.steady, default=float("nan"))

    @property
    def quiet(self) -> bool:
        return bool(self.steady) and self.spread <= TARGET


def steady_ratios(run: Run) -> list[float]:
    """Each steady round's TTFT and first gaps against the median of the same shape's
    other steady rounds."""
    out: list[float] = []
    for shape in run.shapes:
        steady = [r for r in run.rounds if r.shape == shape][1:]
        out += peer_ratios([r.ttft_seconds for r in steady])
        out += peer_ratios([r.gap_seconds for r in steady])
    return out


def load(folder: Path, name: str) -> Start:
    path = folder / "report.json"
    try:
        report = json.loads(path.read_text())
    except OSError as exc:
        raise StartsError(f"{path}: {exc.strerror}; give the --out folder of a check") from None
    except json.JSONDecodeError as exc:
        raise StartsError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    data = report.get("first_request") if isinstance(report, dict) else None
    if not data or not data.get("rounds"):
        raise StartsError(
            f"{path}: no first-request rounds (the start never became ready, or the "
            "check ran without them)"
        )
    try:
        run = run_from_dict(data)
    except (KeyError, TypeError) as exc:
        raise StartsError(f"{path}: its rounds are not a check's ({exc!r} in them)") from None
    shapes = summarise(run)
    if not shapes:
        raise StartsError(f"{path}: no shape has a steady round after its first")
    return Start(name, report.get("startup_phases_seconds") or {}, shapes, steady_ratios(run))


def _seconds(phases: dict[str, float], key: str) -> str:
    value = phases.get(key)
    return "–" if value is None else f"{value:.1f} s"


def _ratio(value: float) -> str:
    text = f"{value:.2f}×"
    return f"**{text}**" if value > TARGET else text


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} ({100 * part / whole:.0f} %)" if whole else "none"


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}×" if values else "–"


def render(starts: list[Start]) -> str:
    shapes = list(dict.fromkeys(s.shape for start in starts for s in start.shapes))
    lines = [
        "| start | launch → /ready | pre-flight | " + " | ".join(shapes) + " | steady spread |",
        "|---|---|---|" + "---|" * len(shapes) + "---|",
    ]
    for start in starts:
        by_shape = {s.shape: s for s in start.shapes}
        cells = [
            f"{_ratio(by_shape[shape].ttft_ratio)} ({_ratio(by_shape[shape].gap_ratio)})"
            if shape in by_shape
            else "–"
            for shape in shapes
        ]
        lines.append(
            f"| {start.name} | {_seconds(start.phases, READY)} | "
            f"{_seconds(start.phases, PRE_FLIGHT)} | "
            + " | ".join(cells)
            + f" | {_ratio(start.spread) if start.steady else '–'} |"
        )
    firsts = [r for start in starts for r in start.firsts]
    steady = [r for start in starts for r in start.steady]
    quiet = [start for start in starts if start.quiet]
    quiet_firsts = [r for start in quiet for r in start.firsts]
    lines += [
        "",
        "First round against the median of the later ones: TTFT (first 8 gaps); steady "
        "spread: the start's worst steady round against the median of the other steady "
        f"rounds of its shape. Over {TARGET}× in bold.",
        "",
        f"- Target (first ≤ {TARGET}× steady, TTFT and gaps, every shape): met in "
        f"{sum(start.met for start in starts)} of {len(starts)} starts.",
        f"- First rounds over {TARGET}× of their steady median: "
        f"{_share(sum(r > TARGET for r in firsts), len(firsts))}; steady rounds over "
        f"{TARGET}× of their peers: {_share(sum(r > TARGET for r in steady), len(steady))}.",
        f"- The typical first round: {_median(firsts)} of its steady median (the median "
        f"of those ratios; of a steady round against its peers: {_median(steady)}).",
    ]
    if quiet:
        lines.append(
            f"- Quiet starts (every steady round within {TARGET}× of its peers): "
            + ", ".join(start.name for start in quiet)
            + f"; their first rounds within {TARGET}×: "
            f"{sum(r <= TARGET for r in quiet_firsts)} of {len(quiet_firsts)}."
        )
    elif steady:
        lines.append(
            f"- No quiet start: every start has a steady round over {TARGET}× of its peers, "
            "so none can tell a first-request cost from the host's own spread."
        )
    else:
        lines.append(
            "- No steady spread: a shape needs two steady rounds or more for one "
            "(the check's --steady)."
        )
    return "\n".join(lines)


def names(folders: Sequence[Path]) -> list[str]:
    """Each folder's name, or every one as parent/name where two share a name."""
    plain = [f.name for f in folders]
    if len(set(plain)) == len(plain):
        return plain
    return [f"{f.parent.name}/{f.name}" for f in folders]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(argv if argv is not None else sys.argv[1:])
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    folders = [Path(p) for p in args]
    if not folders or any(str(f).startswith("-") for f in folders):
        print(
            "usage: python -m entrypoint.gpu_check.starts OUT...  (each OUT holds a "
            "check's report.json)",
            file=sys.stderr,
        )
        return 2
    try:
        starts = [load(folder, name) for folder, name in zip(folders, names(folders), strict=True)]
    except StartsError as exc:
        print(f"sparkserve: error: {exc}", file=sys.stderr)
        return 2
    print(render(starts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
