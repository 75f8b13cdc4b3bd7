"""The pieces both faces build from their settings: request preparation (keys and the
salt secret read here), admission, and what the control endpoint drives."""

from __future__ import annotations

from gateway.core.admission import Admission, AdmissionLimits
from gateway.core.control import ControlPoll, MemoryGate
from gateway.core.divergence import DivergenceTracker
from gateway.core.errors import ConfigError
from gateway.core.layout import VolatileMatcher
from gateway.core.metrics import GatewayMetrics
from gateway.core.prepare import Preparer
from gateway.core.tenancy import Authenticator, KeyTable, SaltMaker, parse_cache_groups
from gateway.core.thermal import ThermalGuard
from gateway.edge.secrets import load_secret, read_key_entries
from gateway.edge.settings import CommonSettings


def preparer_of(
    settings: CommonSettings,
    metrics: GatewayMetrics,
    *,
    affinity_needed: bool,
    headers_needed: bool,
) -> Preparer:
    """The request preparation of `settings`; `affinity_needed`: there are replicas to
    choose between; `headers_needed`: the request is sent over HTTP (not the embedded
    gateway's handover to vLLM's handler)."""
    keys = KeyTable(read_key_entries(settings))
    if settings.auth == "on" and not len(keys):
        raise ConfigError(
            "GATEWAY_AUTH=on needs GATEWAY_API_KEYS or GATEWAY_API_KEYS_FILE "
            "(or set GATEWAY_AUTH=off to serve without keys)"
        )
    salts = SaltMaker(load_secret(settings), parse_cache_groups(settings.cache_groups))
    return Preparer(
        auth=Authenticator(keys, required=settings.auth == "on"),
        salts=salts,
        matcher=VolatileMatcher(settings.layout_rules),
        divergence=DivergenceTracker(settings.session_memory),
        metrics=metrics,
        max_body_bytes=settings.max_body_bytes,
        layout_enabled=settings.layout == "on",
        affinity_needed=affinity_needed,
        headers_needed=headers_needed,
    )


def admission_of(settings: CommonSettings) -> Admission:
    return Admission(
        AdmissionLimits(
            max_concurrency=settings.max_concurrency,
            max_concurrency_per_key=settings.max_concurrency_per_key,
            queue_size=settings.queue_size,
            queue_timeout_seconds=settings.queue_timeout_seconds,
            retry_after_seconds=settings.retry_after_seconds,
        )
    )


def control_poll_of(
    settings: CommonSettings, admission: Admission, metrics: GatewayMetrics
) -> ControlPoll:
    """What the control endpoint's /metrics drives: the thermal guard, the memory gate."""
    guard = ThermalGuard(
        admission,
        metrics,
        max_concurrency=settings.max_concurrency,
        threshold_celsius=settings.thermal_threshold_celsius,
        fraction=settings.thermal_concurrency_fraction,
    )
    return ControlPoll(guard, MemoryGate(admission, metrics))
