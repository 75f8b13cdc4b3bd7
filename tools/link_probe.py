"""Measure a link between two ranks with torch.distributed all-reduces; print the planner's
`--node-link-gbs X --node-link-latency-us Y`.

Run one process per node (rank 0 listens at --addr:--port; NCCL on GPUs, gloo on CPU):

    python -m tools.link_probe --rank 0 --addr 10.9.0.1 --port 29510 --backend gloo
    python -m tools.link_probe --rank 1 --addr 10.9.0.1 --port 29510 --backend gloo

Each message size is all-reduced `--iters` times after `--warmup` untimed ones; a size's
time is the median over the iterations. The planner models one all-reduce as latency +
2·(n−1)/n · bytes / bandwidth (`budget.speed.comm_seconds`), so the fit is the same line:
latency = the median time of the `FIT_SIZES` smallest messages, bandwidth = 2·(n−1)/n ÷
the slope of a least-squares line (statistics.linear_regression) through the `FIT_SIZES`
largest sizes.
Pick the interface with GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from budget import parsers

FIT_SIZES = 4  # the largest sizes the bandwidth line goes through
ELEMENT_BYTES = 4  # float32
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


class ProbeError(Exception):
    """A failure the CLI reports in one line (exit 1)."""


@dataclass(frozen=True)
class Sample:
    size_bytes: int
    seconds: float  # median of one all-reduce


@dataclass(frozen=True)
class LinkFit:
    gbs: float  # GB/s = 10⁹ bytes/s, as the planner's node_link_gbs
    latency_us: float

    def planner_flags(self) -> str:
        return f"--node-link-gbs {self.gbs:.3g} --node-link-latency-us {self.latency_us:.3g}"


def fit_link(samples: Sequence[Sample], world_size: int) -> LinkFit:
    """Latency: the median time of the `FIT_SIZES` smallest messages; bandwidth: from the
    line through the `FIT_SIZES` largest."""
    ordered = sorted(samples, key=lambda s: s.size_bytes)
    large = ordered[-FIT_SIZES:]
    if len(ordered) <= FIT_SIZES or len({s.size_bytes for s in large}) < 2:
        raise ProbeError(f"need more than {FIT_SIZES} message sizes to fit a line")
    fit = statistics.linear_regression([s.size_bytes for s in large], [s.seconds for s in large])
    if fit.slope <= 0:
        raise ProbeError(
            "the large messages did not take longer than the small ones; raise --max-bytes "
            "(or --iters, on a busy host)"
        )
    bus_factor = 2 * (world_size - 1) / world_size  # ring all-reduce: bytes each rank sends
    latency = statistics.median(s.seconds for s in ordered[:FIT_SIZES])
    return LinkFit(gbs=bus_factor / fit.slope / 1e9, latency_us=latency * 1e6)


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from `min_bytes` to `max_bytes`, whole float32 elements."""
    sizes, size = [], max(min_bytes, ELEMENT_BYTES)
    while size <= max_bytes:
        sizes.append(size - size % ELEMENT_BYTES)
        size *= 2
    return sizes


def _time_all_reduce(tensor: Any, iters: int, warmup: int, sync: Any) -> float:
    import torch.distributed as dist

    times = []
    for i in range(warmup + iters):
        sync()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(args: argparse.Namespace) -> list[Sample]:
    import torch
    import torch.distributed as dist

    cuda = args.backend == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    samples = []
    for size in message_sizes(args.min_bytes, args.max_bytes):
        tensor = torch.ones(size // ELEMENT_BYTES, dtype=torch.float32, device=device)
        dist.barrier()
        samples.append(Sample(size, _time_all_reduce(tensor, args.iters, args.warmup, sync)))
    return samples


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _connect(args: argparse.Namespace) -> None:
    # c10d logs its own error, C++ frames and all, before raising; this tool says it in
    # one line instead (set TORCH_CPP_LOG_LEVEL=INFO to see c10d's logs).
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    import torch.distributed as dist

    try:
        dist.init_process_group(
            args.backend,
            init_method=f"tcp://{args.addr}:{args.port}",
            rank=args.rank,
            world_size=args.world_size,
            timeout=timedelta(seconds=args.timeout_s),
        )
    except (RuntimeError, OSError) as exc:  # DistStoreError is a RuntimeError
        raise ProbeError(
            f"rank {args.rank}: no rendezvous at {args.addr}:{args.port} within "
            f"{args.timeout_s:g} s ({_first_line(exc)})"
        ) from None


def render(samples: Sequence[Sample], link: LinkFit, args: argparse.Namespace) -> str:
    rows = [f"{'bytes':>12}  {'µs per all-reduce':>18}  {'GB/s (bytes / time)':>20}"]
    for s in samples:
        gbs = s.size_bytes / s.seconds / 1e9
        rows.append(f"{s.size_bytes:>12,}  {s.seconds * 1e6:>18.1f}  {gbs:>20.3f}")
    rows += [
        f"link ({args.backend}, {args.world_size} ranks via {args.addr}): "
        f"{link.gbs:.3g} GB/s, {link.latency_us:.3g} µs",
        f"planner flags: {link.planner_flags()}",
    ]
    return "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    def typed(parse: Any) -> Any:
        def wrapped(raw: str) -> Any:
            try:
                return parse(raw)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(f"{raw!r}: {exc}") from None

        return wrapped

    p = argparse.ArgumentParser(
        prog="python -m tools.link_probe", description=__doc__.split("\n")[0]
    )
    p.add_argument("--rank", type=typed(parsers.non_negative_int), required=True)
    p.add_argument("--world-size", type=typed(parsers.positive_int), default=2)
    p.add_argument("--addr", required=True, help="rank 0's address on the link")
    p.add_argument("--port", type=typed(parsers.port), default=29510)
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--min-bytes", type=typed(parsers.byte_size), default=4)
    p.add_argument("--max-bytes", type=typed(parsers.byte_size), default=64 * 2**20)
    p.add_argument("--iters", type=typed(parsers.positive_int), default=20)
    p.add_argument("--warmup", type=typed(parsers.non_negative_int), default=3)
    p.add_argument("--timeout-s", type=typed(parsers.positive_seconds), default=120.0)
    p.add_argument("--json", type=Path, help="also write the samples and fit here (rank 0)")
    return p


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.world_size < 2:
        p.error(f"--world-size {args.world_size}: a link needs 2 ranks or more")
    if args.rank >= args.world_size:
        p.error(f"--rank {args.rank}: must be below --world-size {args.world_size}")
    if args.min_bytes > args.max_bytes:
        p.error(f"--min-bytes {args.min_bytes} is above --max-bytes {args.max_bytes}")
    if len(message_sizes(args.min_bytes, args.max_bytes)) <= FIT_SIZES:
        p.error(f"--min-bytes..--max-bytes must span more than {FIT_SIZES} powers of two")


def main(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)  # exits 2 with the flag's name on bad input
    _check(p, args)
    try:
        _connect(args)
        samples = measure(args)
        link = fit_link(samples, args.world_size)
    except ProbeError as exc:
        print(f"link_probe: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except RuntimeError as exc:  # the peer went away mid-measurement
        print(
            f"link_probe: rank {args.rank}: all-reduce failed ({_first_line(exc)})", file=sys.stderr
        )
        return EXIT_FAILED
    if args.rank == 0:
        print(render(samples, link, args), flush=True)
        if args.json:
            record = {"backend": args.backend, "world_size": args.world_size, "addr": args.addr,
                      "samples": [asdict(s) for s in samples], "link": asdict(link),
                      "planner_flags": link.planner_flags()}  # fmt: skip
            args.json.write_text(json.dumps(record, indent=2) + "\n")
    import torch.distributed as dist

    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
