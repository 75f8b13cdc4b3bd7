"""A real Prometheus (Debian's binary) for tests.

Its config comes from `tools.demo.prometheus_config`, which keeps prometheus/prometheus.yml
the one source: same jobs, same rules, only the targets (compose service names →
127.0.0.1 ports) and the intervals change.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.integration.promtool import binary
from tests.vllm_proc import free_port

READY_TIMEOUT_S = 30.0


def finite_values(result: list[dict[str, Any]]) -> list[float]:
    return [float(item["value"][1]) for item in result if math.isfinite(float(item["value"][1]))]


class Prometheus:
    """`prometheus` as a child process on a free 127.0.0.1 port, storage under `workdir`."""

    def __init__(self, workdir: Path, config: dict[str, Any]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log_path = workdir / "prometheus.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address={self.url.removeprefix('http://')}",
                "--log.level=warn",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _api(self, path: str, **params: Any) -> Any:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body.get('error', response.text)}")
        return body["data"]

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {timeout_s}s")

    def targets_not_up(self, expected: int) -> list[str]:
        """Targets not scraped successfully yet (Prometheus applies targets after ~5 s)."""
        targets = self._api("targets", state="active")["activeTargets"]
        problems = [f"{t['scrapeUrl']}: {t['health']} {t['lastError']}" for t in targets]
        problems = [p for p, t in zip(problems, targets, strict=True) if t["health"] != "up"]
        if len(targets) < expected:
            problems.append(f"{expected - len(targets)} target(s) not loaded yet")
        return problems

    def wait_targets_up(self, expected: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Return once every target has been scraped: traffic after this is seen as a rate."""
        deadline = time.monotonic() + timeout_s
        while (not_up := self.targets_not_up(expected)) and time.monotonic() < deadline:
            time.sleep(0.5)
        if not_up:
            raise RuntimeError(f"targets not up after {timeout_s}s: {not_up}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self._api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        values: list[str] = self._api(f"label/{label}/values", **{"match[]": match})
        return values

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
