"""prometheus/prometheus.yml and rules.yml are what Prometheus itself accepts."""

from __future__ import annotations

import yaml

from tests.integration.promtool import PROMETHEUS_DIR, promtool

EXPECTED_JOBS = {"vllm": "vllm:8000", "entrypoint": "vllm:8001", "gateway": "gateway:8080"}


def test_promtool_accepts_config_and_its_rules():
    result = promtool("check", "config", PROMETHEUS_DIR / "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_promtool_accepts_rules():
    result = promtool("check", "rules", PROMETHEUS_DIR / "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def _target(job: dict) -> str:
    """`host:port` of a static target, or of the DNS name a job resolves."""
    if "static_configs" in job:
        (target,) = job["static_configs"][0]["targets"]
        return target
    (found,) = job["dns_sd_configs"]
    (name,) = found["names"]
    return f"{name}:{found['port']}"


def test_scrapes_the_three_services_every_5s():
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    assert config["global"]["scrape_interval"] == "5s"
    assert {job["job_name"]: _target(job) for job in config["scrape_configs"]} == EXPECTED_JOBS


def test_every_vllm_replica_is_a_target_of_its_own():
    """A static `vllm:8000` would scrape one replica of a scaled service at random; an A
    lookup of the service name lists each one (compose.replicas.yaml)."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        if job["job_name"] in ("vllm", "entrypoint"):
            assert job["dns_sd_configs"][0]["type"] == "A", job
