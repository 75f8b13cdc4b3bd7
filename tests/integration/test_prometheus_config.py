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


def test_scrapes_the_three_services_every_5s():
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    assert config["global"]["scrape_interval"] == "5s"
    jobs = {
        job["job_name"]: job["static_configs"][0]["targets"][0] for job in config["scrape_configs"]
    }
    assert jobs == EXPECTED_JOBS
