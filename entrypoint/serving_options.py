"""The entrypoint's own settings for serving one node: what vLLM loads and listens on,
the warm-up, the supervisor's timeouts and the memory watchdog.

Each field is declared like `PlanOptions`'s (`budget.options.declare`: its
`SPARKSERVE_<NAME>` variable, `--<name>` flag and help); `config.EntrypointConfig`
is these fields, the cluster's (`cluster_options`) and the planner's (`plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from budget import parsers
from budget.options import declare


def non_negative_gib(raw: str) -> float:
    """A size in GiB, 0 or more (a plain number: 7.5 means 7.5 GiB)."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("must be a number of GiB >= 0") from None
    if not 0 <= value < float("inf"):  # NaN fails too
        raise ValueError("must be a number of GiB >= 0")
    return value


@dataclass(frozen=True, kw_only=True)
class ServingOptions:
    weights: str | None = field(
        default=None,
        metadata=declare(
            parsers.text,
            "What vLLM loads (--model) when SPARKSERVE_MODEL is a "
            "profile name: a checkpoint directory or HF repo id.",
            "DIR|REPO",
        ),
    )
    load_format: str | None = field(
        default=None,
        metadata=declare(
            parsers.word,
            "How vLLM loads the weights (vLLM --load-format: auto, safetensors, dummy = "
            "random weights, no files needed, …). Unset: vLLM's default (auto).",
            "FORMAT",
        ),
    )
    host: str = field(
        default="0.0.0.0",
        metadata=declare(parsers.text, "Address vLLM's OpenAI server listens on.", "ADDR"),
    )
    port: int = field(
        default=8000, metadata=declare(parsers.port, "Port of vLLM's OpenAI server.", "PORT")
    )
    control_port: int = field(
        default=8001,
        metadata=declare(parsers.port, "Port of the entrypoint's own /ready and /metrics.", "PORT"),
    )
    api_key: str | None = field(
        default=None,
        metadata=declare(
            parsers.text,
            "API key vLLM requires on /v1; given to vLLM as VLLM_API_KEY, not on its "
            "command line (never logged).",
            "KEY",
            secret=True,
        ),
    )
    gateway: str = field(
        default="off",
        metadata=declare(
            parsers.choice(("off", "embedded")),
            "embedded: serve the sparkserve gateway inside vLLM's API server "
            "(GATEWAY_* settings; docs/gateway.md); off: plain vLLM.",
            "off|embedded",
        ),
    )
    warmup: bool = field(
        default=True,
        metadata=declare(
            parsers.switch,
            "Warm up the real request shapes before /ready turns 200 (never for --runner "
            "pooling: vLLM's pooling runner serves no chat).",
            "on|off",
        ),
    )
    vllm_extra_args: tuple[str, ...] = field(
        default=(),
        metadata=declare(
            parsers.argv_words,
            "More vLLM flags, shell words, appended last (checked against vLLM's parser).",
            "ARGS",
        ),
    )
    force: bool = field(
        default=False,
        metadata=declare(
            parsers.switch,
            "Start even when the plan does not fit (or free memory is short of vLLM's "
            "start check).",
            "on|off",
        ),
    )
    startup_timeout: float = field(
        default=1800.0,
        metadata=declare(
            parsers.positive_seconds,
            "Seconds from launch until vLLM must answer /health (exit 3 after).",
            "SECONDS",
        ),
    )
    unhealthy_exit_seconds: float = field(
        default=60.0,
        metadata=declare(
            parsers.positive_seconds,
            "Seconds vLLM may fail /health after ready (/ready is 503 meanwhile) before exit 3.",
            "SECONDS",
        ),
    )
    stall_timeout_s: float = field(
        default=120.0,
        metadata=declare(
            parsers.non_negative_seconds,
            "Seconds the engine may make no progress (no token, prefill chunk or finished "
            "request) with requests admitted, or leave a one-token probe unanswered while "
            "idle, before the entrypoint stops vLLM and exits 3; 0 turns the watch off.",
            "SECONDS",
        ),
    )
    stop_grace_seconds: float = field(
        default=30.0,
        metadata=declare(
            parsers.positive_seconds, "Seconds between SIGTERM to vLLM and SIGKILL.", "SECONDS"
        ),
    )
    memory_floor_gib: float | None = field(
        default=None,
        metadata=declare(
            non_negative_gib,
            "Available memory (MemAvailable, or the container's memory cgroup where it has "
            "a limit: the smaller) under which the memory watchdog stops admitting work "
            "(/ready 503, phase memory_low) and then stops vLLM and exits 4, before unified "
            "memory runs out and the host hangs (docs/entrypoint.md, Memory watchdog); 0 "
            "turns it off. Unset: half the plan's system_reserve (a twentieth of the memory "
            "where the plan keeps none), on unified memory only.",
            "GiB",
        ),
    )
    memory_hold_seconds: float = field(
        default=3.0,
        metadata=declare(
            parsers.non_negative_seconds,
            "Seconds available memory must stay under the floor before work is refused "
            "(one short dip does not trip the watchdog).",
            "SECONDS",
        ),
    )
    memory_drain_seconds: float = field(
        default=10.0,
        metadata=declare(
            parsers.non_negative_seconds,
            "Seconds of refusing work under the floor before vLLM is stopped (exit 4), at "
            "once if memory falls under half the floor; memory back above it reopens.",
            "SECONDS",
        ),
    )
    vllm_nice: int = field(
        default=0,
        metadata=declare(
            parsers.nice,
            "Lower vLLM's CPU priority (its session's too) so that what shares its cores "
            "(gateway, health checks) is not starved by its engine loop; 0 leaves it.",
            "0-19",
        ),
    )
    cache_dir: str | None = field(
        default=None,
        metadata=declare(
            parsers.text,
            "Directory for vLLM/Triton/inductor compile caches "
            "(a volume, so restarts do not recompile).",
            "DIR",
        ),
    )
