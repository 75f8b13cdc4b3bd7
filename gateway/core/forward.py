"""One request as the gateway hands it on (`Forward`), and what is recorded when a
generation ends (latency, tokens by tenant), for both faces: the standalone proxy
(gateway/standalone/proxy.py) and the embedded relay (gateway/embedded/relay.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.core.jsoncodec import loads_or_none
from gateway.core.metrics import GatewayMetrics
from gateway.core.tenancy import Principal

log = logging.getLogger("gateway.proxy")


@dataclass
class Forward:
    """One request to send to vLLM, as prepared by the route."""

    method: str
    path: str
    principal: Principal
    headers: list[tuple[str, str]]
    body: bytes | None = None
    stream: bool = False
    drop_usage: bool = False
    generation: bool = False
    affinity: bytes | None = None
    # The request body's `model` (a string), which picks the model's replicas.
    model: str | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    # Work the request does not wait for (the prefix divergence of its session): run by
    # `done` once the gateway is through with the request, out of its time to first token.
    after: Callable[[], None] | None = None

    def done(self) -> None:
        """The gateway is through with this request: run `after`, once."""
        after, self.after = self.after, None
        if after is not None:
            try:
                after()
            except Exception:
                log.exception("unexpected error after %s", self.path)


def record_finish(metrics: GatewayMetrics, forward: Forward, usage: dict[str, Any] | None) -> None:
    """A generation ended: its end-to-end latency and, when vLLM sent usage, its
    tokens by tenant (prompt, completion, cached prompt)."""
    tenant = forward.principal.tenant
    metrics.e2e_latency.observe(time.monotonic() - forward.started)
    if usage is None:
        return
    # Chat/completions name them prompt/completion; the Responses API input/output.
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    metrics.prompt_tokens.labels(tenant).inc(_count(prompt))
    metrics.completion_tokens.labels(tenant).inc(_count(completion))
    details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
    if isinstance(details, dict):
        metrics.cached_prompt_tokens.labels(tenant).inc(_count(details.get("cached_tokens")))


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def usage_of(status: int, body: bytes) -> dict[str, Any] | None:
    if status != 200 or b'"usage"' not in body:
        return None
    payload = loads_or_none(body)
    usage = payload.get("usage") if isinstance(payload, dict) else None
    return usage if isinstance(usage, dict) else None
