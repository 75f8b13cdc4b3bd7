"""`python -m entrypoint [--dry-run] [--<option> VALUE …]`: the edge where errors become exit codes.

Every option is a SPARKSERVE_* variable (see config.OPTIONS); the same option as
a flag wins over the variable. Errors print one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

from entrypoint.config import OPTIONS, Option, load_config
from entrypoint.console import Console
from entrypoint.errors import EXIT_BAD_CONFIG, EntrypointError
from entrypoint.serve import dry_run, serve

HELP_WIDTH = 100
DESCRIPTION = """\
Serve a model with vLLM, sized by the budget planner: plan → pre-flight → `vllm serve`
with the plan's flags → /health → warm-up of the real request shapes → ready.
Supervised: vLLM exiting ends the entrypoint (exit 3); SIGTERM stops vLLM (exit 0); on
unified memory, available memory under the floor stops it before the host hangs (exit 4).

Every option is an environment variable (shown in brackets); a flag wins over it."""

EPILOG = """\
exit codes: 0 stopped by SIGTERM/SIGINT · 1 the plan does not fit (or free memory is short
of vLLM's start check) · 2 bad configuration or failed pre-flight · 3 vLLM exited, died or
never became healthy · 4 the memory watchdog stopped vLLM (available memory stayed under
SPARKSERVE_MEMORY_FLOOR_GIB) · 128+N the entrypoint was ended by signal N (SIGHUP,
SIGQUIT, SIGKILL).
control endpoint (SPARKSERVE_CONTROL_PORT): /ready 200 only after warm-up; /metrics."""


def shown_default(option: Option) -> str:
    if option.secret or option.default is None:
        return "unset"
    if isinstance(option.default, bool):
        return "on" if option.default else "off"
    if isinstance(option.default, tuple):
        return " ".join(option.default) or "none"
    return f"{option.default:g}" if isinstance(option.default, float) else str(option.default)


def _formatter(prog: str) -> argparse.HelpFormatter:
    """A fixed width, so --help (and docs/entrypoint.md made from it) is the same everywhere."""
    return argparse.RawDescriptionHelpFormatter(prog, width=HELP_WIDTH, max_help_position=34)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and the exact vLLM command, start nothing "
        "(exit 1 when the plan does not fit)",
    )
    for option in OPTIONS:
        add_option(parser, option)
    return parser


def add_option(parser: argparse.ArgumentParser, option: Option) -> None:
    """`option` as a flag whose raw string lands in `option.field` (None when not given)."""
    switch = option.is_switch  # `--force` alone means on
    parser.add_argument(
        option.flag,
        dest=option.field,
        metavar=option.metavar,
        default=None,
        nargs="?" if switch else None,
        const="on" if switch else None,
        help=f"{option.help} [{option.env}] (default: {shown_default(option)})",
    )


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    environ = dict(os.environ if environ is None else environ)
    console = Console()
    flags = {option.field: getattr(args, option.field) for option in OPTIONS}
    try:
        config = load_config(environ, flags)
        if args.dry_run:
            return dry_run(config, console)
        return serve(config, console, environ)
    except EntrypointError as exc:
        console.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_BAD_CONFIG if args.dry_run else 0


def run() -> None:
    sys.exit(main())
