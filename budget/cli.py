"""`python -m budget plan` — the command-line contract of docs/budget.md.

Exit 0 when the plan fits, 1 when it does not (the output says why and what to
change), 2 on bad input (one line on stderr, never a traceback).  The plan's options
are made from `budget.options.SETTINGS`, as the entrypoint's settings are.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from budget.chart import write_chart
from budget.errors import BudgetError
from budget.flags import env_lines, vllm_args
from budget.host import probe_host
from budget.options import SETTINGS, PlanOptions, Setting
from budget.plan_dict import plan_dict
from budget.planner import build_plan
from budget.profiles import hardware_names, model_names
from budget.render import render_table
from budget.stack import StackPlan, load_stack, plan_stack
from budget.stack_compose import compose_override
from budget.stack_render import render_stack, stack_dict

FORMATS = ("table", "json", "argv", "env", "compose")  # compose: with --stack only


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _typed(setting: Setting) -> Callable[[str], Any]:
    """The setting's parser, its ValueError shown by argparse as `argument --x: 'v': …`."""

    def parse(raw: str) -> Any:
        try:
            return setting.parse(raw)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{raw!r}: {exc}") from None

    return parse


def _help(setting: Setting) -> str:
    if setting.default is None:
        return setting.help
    return f"{setting.help} (default: {setting.default})"


def _add_setting(p: argparse.ArgumentParser, setting: Setting) -> None:
    if setting.is_switch:  # `--uma` alone means on; `--no-uma` off
        p.add_argument(
            setting.flag,
            dest=setting.name,
            type=_typed(setting),
            nargs="?",
            const=True,
            metavar=setting.metavar,
            help=_help(setting),
        )
        p.add_argument(
            "--no-" + setting.flag[2:],
            dest=setting.name,
            action="store_const",
            const=False,
            help=f"= {setting.flag} off",
        )
        return
    p.add_argument(
        setting.flag,
        dest=setting.name,
        type=_typed(setting),
        metavar=setting.metavar,
        help=_help(setting),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m budget", description="Size vLLM's memory and emit its flags.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="plan one model on one machine")
    for setting in SETTINGS:
        _add_setting(plan, setting)
    plan.add_argument("--format", choices=FORMATS, default="table")
    plan.add_argument(
        "--json", dest="format", action="store_const", const="json", help="= --format json"
    )
    plan.add_argument("--chart", type=Path, metavar="FILE", help="write a PNG or SVG stacked bar")
    plan.add_argument(
        "--stack",
        type=Path,
        metavar="FILE",
        help="plan several models on one box from a stack file (TOML; docs/budget.md); "
        "the file holds every setting",
    )
    sub.add_parser("profiles", help="list model and hardware profiles")
    return parser


def options_from_args(args: argparse.Namespace) -> PlanOptions:
    given = {s.name: getattr(args, s.name) for s in SETTINGS}
    return PlanOptions(**{name: value for name, value in given.items() if value is not None})


def _emit_stack(args: argparse.Namespace) -> int:
    given = [s.flag for s in SETTINGS if getattr(args, s.name) is not None]
    if given or args.chart is not None:
        flag = given[0] if given else "--chart"
        raise BudgetError(f"--stack takes every setting from its file; {flag} is not for it")
    if args.format not in ("table", "json", "compose"):
        raise BudgetError(f"--stack prints --format table, json or compose, not {args.format}")
    stack = plan_stack(load_stack(args.stack), probe_host())
    if args.format == "compose":
        return _emit_compose(stack)
    if args.format == "json":
        print(json.dumps(stack_dict(stack), indent=2))
    else:
        print(render_stack(stack))
    return 0 if stack.fits else 1


def _emit_compose(stack: StackPlan) -> int:
    """The compose override on stdout; where the stack does not fit, why on stderr and
    nothing on stdout (exit 1), as `--format env` leaves no .env to start from."""
    if not stack.fits:
        for why in stack.shortfalls:
            print(f"budget: does not fit: {why}", file=sys.stderr)
        return 1
    cpu = stack.models[0].plan.settings.device == "cpu"
    base = Path("compose.cpu.yaml" if cpu else "compose.yaml").resolve()
    if not base.is_file():
        raise BudgetError(f"--format compose extends {base.name}: run it in the checkout")
    print(compose_override(stack, str(base)), end="")
    return 0


def _emit(args: argparse.Namespace) -> int:
    if args.stack is not None:
        return _emit_stack(args)
    if args.format == "compose":
        raise BudgetError("--format compose is for --stack FILE (several models)")
    plan = build_plan(options_from_args(args), probe_host())
    if args.chart is not None:
        write_chart(plan, args.chart)
    if args.format == "json":
        print(json.dumps(plan_dict(plan), indent=2))
    elif args.format == "argv":
        print("\n".join(vllm_args(plan)))
    elif args.format == "env":
        print("\n".join(env_lines(plan)))
    else:
        print(render_table(plan))
    return 0 if plan.fits else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "profiles":
            print("models:   " + ", ".join(model_names()))
            print("hardware: " + ", ".join(hardware_names()))
            return 0
        return _emit(args)
    except BudgetError as exc:
        print(f"budget: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
