"""tools/demo.py without starting vLLM: its settings, Prometheus config and process handling."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from devtools.tiny_model import write_tiny_model
from tests.integration.promtool import promtool
from tools import demo

HOSTS = {"vllm": ["127.0.0.1:1"], "entrypoint": ["127.0.0.1:2"], "gateway": ["127.0.0.1:3"]}


def test_demo_settings_make_a_plan_that_fits(tmp_path):
    """`python -m entrypoint --dry-run` with the demo's settings: the tiny model, MTP off."""
    model = write_tiny_model(tmp_path / "model", "dense")
    env = {"PATH": "/usr/bin:/bin", **demo.entrypoint_env(model, demo.Ports())}
    result = subprocess.run(
        [sys.executable, "-m", "entrypoint", "--dry-run"],
        env=env, capture_output=True, text=True, timeout=120, cwd=demo.ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FITS" in result.stdout
    assert "--speculative-config" not in result.stdout
    assert "--load-format dummy" in result.stdout


def test_prometheus_config_keeps_jobs_and_rules_and_sets_targets(tmp_path):
    config = demo.prometheus_config(HOSTS, "5s")
    targets = {
        job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]
    }
    assert targets == HOSTS
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = promtool("check", "config", path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_config_refuses_a_missing_job():
    with pytest.raises(ValueError, match="prometheus.yml has"):
        demo.prometheus_config({"vllm": ["127.0.0.1:1"]}, "5s")


def test_banner_shows_the_urls_and_an_example_call():
    text = demo.banner(demo.Ports(gateway=18080))
    assert "http://127.0.0.1:18080/v1" in text
    assert f"Bearer {demo.DEMO_KEY}" in text
    assert "from openai import OpenAI" in text


def test_stop_all_ends_every_child(tmp_path):
    procs = demo.Processes(tmp_path)
    procs.start("sleeper", ["sleep", "60"], {})
    ((_, proc),) = procs.running
    procs.stop_all()
    assert proc.returncode is not None and procs.running == []
