"""Every dashboard query through a real Prometheus, on the GPU, under traffic.

Beside a running `python -m entrypoint` (vLLM on SPARKSERVE_PORT, the control endpoint
on SPARKSERVE_CONTROL_PORT), this starts two gateways in this process (one in front of
vLLM, whose `/readyz` reads the control endpoint; one in front of a dead port, for the
error panels) and Debian's `prometheus` (on PATH) with prometheus/prometheus.yml's jobs
pointed at the three, as tests/integration/test_dashboards_live.py does on CPU. After
the same traffic (tests/integration/traffic.py, model name given), it evaluates every
expression of grafana/dashboards/ and writes one JSON: per query the number of series
and their finite values, plus the metric names each target exposed and the control
endpoint's whole /metrics text (the NVML series).

    python -m tests.entrypoint.gpu_dashboards --vllm URL --control URL --model m --out FILE
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.server import serve
from tests.integration import traffic
from tests.integration.dashboards import all_queries
from tests.integration.prom import Prometheus, finite_values
from tests.vllm_proc import free_port
from tools.demo import prometheus_config

SCRAPES_AFTER_TRAFFIC_S = 4.0
VALUES_KEPT = 4


def metric_names(text: str) -> list[str]:
    return sorted({family.name for family in text_string_to_metric_families(text)})


def evaluate(prometheus: Prometheus, model: str, rate_interval: str) -> list[dict[str, Any]]:
    rows = []
    for query in all_queries():
        expr = query.substituted(model, rate_interval)
        try:
            result = prometheus.query(expr)
            values, error = finite_values(result), None
        except RuntimeError as exc:
            result, values, error = [], [], str(exc)
        rows.append(
            {
                "name": query.name,
                "gpu_only": query.gpu_only,
                "expr": expr,
                "series": len(result),
                "finite_values": [round(v, 6) for v in values[:VALUES_KEPT]],
                "data": bool(values),
                "error": error,
            }
        )
    return rows


def check(vllm: str, control: str, model: str, workdir: Path) -> dict[str, Any]:
    dead_upstream = f"http://127.0.0.1:{free_port()}"
    with (
        serve(traffic.gateway_app(vllm, workdir / "gw", control)) as gateway,
        serve(traffic.gateway_app(dead_upstream, workdir / "dead")) as dead_gateway,
    ):
        targets = {"vllm": [vllm], "entrypoint": [control], "gateway": [gateway, dead_gateway]}
        plain = {job: [u.removeprefix("http://") for u in urls] for job, urls in targets.items()}
        prometheus = Prometheus(workdir / "prometheus", prometheus_config(plain, "1s"))
        try:
            prometheus.wait_ready()
            prometheus.wait_targets_up(sum(map(len, targets.values())))
            started = time.time()
            statuses = traffic.through_gateway(gateway, traffic.KEYS, model)
            statuses["dead_upstream"] = traffic.dead_upstream(dead_gateway, traffic.KEYS[0])
            statuses["speculative"] = traffic.speculative(vllm, model)
            time.sleep(SCRAPES_AFTER_TRAFFIC_S)
            rate_interval = f"{int(time.time() - started) + 30}s"
            texts = {job: traffic.scrape(urls[0]) for job, urls in targets.items()}
            return {
                "statuses": statuses,
                "rate_interval": rate_interval,
                "queries": evaluate(prometheus, model, rate_interval),
                "metric_names": {job: metric_names(text) for job, text in texts.items()},
                "control_metrics": texts["entrypoint"],
            }
        finally:
            prometheus.stop()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.entrypoint.gpu_dashboards", description=__doc__
    )
    parser.add_argument("--vllm", default="http://127.0.0.1:8000", help="vLLM's OpenAI server")
    parser.add_argument("--control", default="http://127.0.0.1:8001", help="control endpoint")
    parser.add_argument("--model", default="m", help="served model name")
    parser.add_argument("--out", type=Path, required=True, help="the JSON written")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dashboards-") as tmp:
        report = check(args.vllm, args.control, args.model, Path(tmp))
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    missing = [q["name"] for q in report["queries"] if not q["data"]]
    with_data = len(report["queries"]) - len(missing)
    print(f"dashboard queries: {with_data} with data, {len(missing)} without: {missing}")
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
