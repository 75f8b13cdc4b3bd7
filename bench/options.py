"""The options `python -m bench run` and `python -m bench sweep` share (bench/cli.py,
bench/sweep_cli.py): in a module of their own, so neither command imports the other."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.scale import SCALES


def parse_workloads(text: str) -> tuple[str, ...]:
    from bench.runner import DEFAULT_SUITE, check_workloads

    if text == "all":
        return DEFAULT_SUITE
    return check_workloads([part.strip() for part in text.split(",") if part.strip()])


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="served model name (default: the first of /v1/models)")
    p.add_argument(
        "--workload",
        default="all",
        help="comma list of short-chat, agent-loop, mixed, long-context, or all",
    )
    p.add_argument("--scale", default="tiny", choices=tuple(SCALES), help="workload sizes")
    p.add_argument("--seed", type=int, default=0, help="seed of every generated prompt")
    p.add_argument("--out", required=True, type=Path, help="run directory to write")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plots", action="store_true", help="no PNG plots (no matplotlib needed)")
