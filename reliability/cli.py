"""`python -m reliability run [--short] [--out DIR] [--docs FILE]`: start the local stack,
run every case, print the table, write report.md / report.json, stop everything.

Exit 0 when no case FAILs (WARN and SKIP are reported only), 1 otherwise, 2 on bad usage,
130 when stopped by Ctrl-C or SIGTERM (`timeout`), after stopping every process it started.
Start it under `flock /tmp/sparkserve-vllm-test.lock` where other vLLM runs may compete.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from devtools.interrupt import interrupt_on_sigterm
from reliability.docs import write_docs
from reliability.report import all_passed, render_json, render_markdown, render_table
from reliability.stack import ROOT
from reliability.suite import run

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m reliability", description=(__doc__ or "").split("\n")[0]
    )
    commands = top.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("run", help="run every case against a freshly started local stack")
    cmd.add_argument(
        "--short", action="store_true", help="the CI version: fewer requests, no pip-audit"
    )
    cmd.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where logs and report.md/json go (default run/reliability/<UTC time>)",
    )
    cmd.add_argument(
        "--docs",
        type=Path,
        default=None,
        help="also write the table into this Markdown file's reliability block",
    )
    cmd.add_argument(
        "--warmup",
        choices=("on", "off"),
        default=None,
        help="entrypoint warm-up (default: on, off with --short)",
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or ROOT / "run" / "reliability" / stamp
    warmup = (args.warmup or ("off" if args.short else "on")) == "on"
    print(
        f"reliability: {'short' if args.short else 'full'} run, logs and reports in {out}",
        flush=True,
    )
    interrupt_on_sigterm()  # `timeout` and kill: the stack is stopped, not orphaned
    try:
        results, meta = run(args.short, out, warmup)
    except KeyboardInterrupt as stop:
        print(
            f"reliability: interrupted ({str(stop) or 'Ctrl-C'}); the stack it started is stopped",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print()
    print(render_table(results))
    (out / "report.md").write_text(render_markdown(results, meta))
    (out / "report.json").write_text(render_json(results, meta))
    if args.docs is not None:
        write_docs(args.docs, render_markdown(results, meta))
    print(f"\nreports: {out / 'report.md'}, {out / 'report.json'}")
    return 0 if all_passed(results) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
