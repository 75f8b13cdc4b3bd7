"""`python -m budget plan --stack FILE --format compose`: the override as the real
`docker compose config` resolves it on top of compose.yaml and compose.cpu.yaml (no engine
needed; tests/docker/test_two_models.py starts it)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from budget.cli import main
from devtools.tiny_model import write_tiny_model
from tests.integration import compose_cli
from tests.integration.dashboards import ROOT

GPU_STACK = ROOT / "budget/profiles/stacks/dgx-spark-chat-embed.toml"
CPU_STACK = """\
device = "cpu"

[[models]]
name = "chat"
role = "chat"
model = "{chat}"
served_model_name = "tiny"
max_model_len = 4096
max_num_seqs = 8
kv_cache_memory_bytes = "512M"

[[models]]
name = "embed"
role = "embedding"
model = "{embed}"
served_model_name = "tiny-embed"
max_model_len = 2048
max_num_seqs = 4
kv_cache_memory_bytes = "128M"
"""


def _plan(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["plan", *args])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def cpu_stack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("stack")
    chat = write_tiny_model(root / "chat", "dense")
    embed = write_tiny_model(root / "embed", "embedding")
    stack = root / "stack.toml"
    stack.write_text(CPU_STACK.format(chat=chat, embed=embed))
    code, text = _plan("--stack", str(stack), "--format", "compose")
    assert code == 0
    override = root / "compose.stack.yaml"
    override.write_text(text)
    code, plan = _plan("--stack", str(stack), "--json")
    assert code == 0
    return override, json.loads(plan)


def test_one_vllm_service_per_model_with_its_slice_of_the_plan(cpu_stack):
    override, plan = cpu_stack
    services = compose_cli.resolved("compose.yaml", "compose.cpu.yaml", override)["services"]
    assert sorted(services) == ["gateway", "prometheus", "vllm-chat", "vllm-embed"]
    for model in plan["models"]:
        service = services[f"vllm-{model['name']}"]
        env = service["environment"]
        settings = model["plan"]
        # compose.cpu.yaml's service, extended: vllm-cpu image, dummy weights, no GPU.
        assert service["image"].startswith("sparkserve/vllm-cpu-app:")
        assert env["SPARKSERVE_LOAD_FORMAT"] == "dummy" and "deploy" not in service
        assert env["SPARKSERVE_MODEL"] == "/models"
        assert env["SPARKSERVE_KV_CACHE_MEMORY_BYTES"] == str(settings["kv_cache_bytes"])
        args = model["vllm_args"]
        assert env["SPARKSERVE_MAX_MODEL_LEN"] == args[args.index("--max-model-len") + 1]
        assert env["SPARKSERVE_MAX_NUM_SEQS"] == args[args.index("--max-num-seqs") + 1]
        mounts = {v["target"]: v for v in service["volumes"]}
        assert mounts["/models"]["source"] == settings["model_dir"]
        assert mounts["/models"]["read_only"] is True
    chat, embed = services["vllm-chat"]["environment"], services["vllm-embed"]["environment"]
    assert (chat["SPARKSERVE_SERVED_MODEL_NAME"], embed["SPARKSERVE_SERVED_MODEL_NAME"]) == (
        "tiny",
        "tiny-embed",
    )
    assert "SPARKSERVE_RUNNER" not in chat and embed["SPARKSERVE_RUNNER"] == "pooling"
    assert "SPARKSERVE_WARMUP" not in embed  # the entrypoint skips it for a pooling model


def test_models_start_in_the_plans_order(cpu_stack):
    override, plan = cpu_stack
    services = compose_cli.resolved("compose.yaml", "compose.cpu.yaml", override)["services"]
    first, second = plan["start_order"]
    assert "depends_on" not in services[f"vllm-{first}"]
    assert services[f"vllm-{second}"]["depends_on"] == {
        f"vllm-{first}": {"condition": "service_healthy", "required": True}
    }


def test_the_gateway_routes_by_model_and_has_no_single_upstream(cpu_stack):
    override, _ = cpu_stack
    services = compose_cli.resolved("compose.yaml", "compose.cpu.yaml", override)["services"]
    gateway = services["gateway"]
    env = gateway["environment"]
    assert "GATEWAY_UPSTREAM_URL" not in env and "GATEWAY_CONTROL_URL" not in env
    assert env["GATEWAY_MODELS"] == "tiny=http://vllm-chat:8000;tiny-embed=http://vllm-embed:8000"
    assert env["GATEWAY_MODEL_CONTROL_URLS"] == (
        "tiny=http://vllm-chat:8001;tiny-embed=http://vllm-embed:8001"
    )
    assert set(gateway["depends_on"]) == {"vllm-chat", "vllm-embed"}


def test_prometheus_scrapes_every_model_with_the_base_configs_globals(cpu_stack):
    override, _ = cpu_stack
    config = compose_cli.resolved("compose.yaml", "compose.cpu.yaml", override)
    prometheus = config["services"]["prometheus"]
    target = prometheus["configs"][0]["target"]
    assert f"--config.file={target}" in prometheus["command"]
    scrape = yaml.safe_load(config["configs"]["prometheus_stack"]["content"])
    base = yaml.safe_load((ROOT / "prometheus/prometheus.yml").read_text())
    assert scrape["global"] == base["global"]
    assert [Path(r).name for r in scrape["rule_files"]] == base["rule_files"]
    jobs = {job["job_name"]: job["static_configs"] for job in scrape["scrape_configs"]}
    assert set(jobs) == {job["job_name"] for job in base["scrape_configs"]}
    assert [c["targets"] for c in jobs["vllm"]] == [["vllm-chat:8000"], ["vllm-embed:8000"]]
    # vLLM's series carry model_name already; the entrypoint's get it from the target.
    assert all("labels" not in c for c in jobs["vllm"])
    assert [c["labels"]["model_name"] for c in jobs["entrypoint"]] == ["tiny", "tiny-embed"]


def test_a_profile_model_asks_for_its_checkpoint_directory():
    code, text = _plan("--stack", str(GPU_STACK), "--format", "compose")
    assert code == 0
    assert "${MODEL_DIR_CHAT:?" in text and "${MODEL_DIR_EMBED:?" in text
    assert f"file: {json.dumps(str(ROOT / 'compose.yaml'))}" in text


def test_the_gpu_override_resolves_on_compose_yaml(tmp_path):
    code, text = _plan("--stack", str(GPU_STACK), "--format", "compose")
    assert code == 0
    override = tmp_path / "compose.stack.yaml"
    override.write_text(text)
    result = compose_cli.run(("compose.yaml", override), "config", "--format", "json", env={
        "MODEL_DIR_CHAT": "/srv/models/chat", "MODEL_DIR_EMBED": "/srv/models/embed"
    })  # fmt: skip
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    embed = services["vllm-embed"]
    assert embed["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    assert embed["environment"]["SPARKSERVE_RUNNER"] == "pooling"
    assert {v["target"]: v["source"] for v in embed["volumes"]}["/models"] == "/srv/models/embed"


def test_without_a_stack_compose_config_is_what_compose_yaml_says():
    """compose.cpu.yaml's `extends` of compose.yaml's vllm changes nothing it resolves to."""
    plain = compose_cli.resolved("compose.yaml")["services"]["vllm"]
    cpu = compose_cli.resolved("compose.yaml", "compose.cpu.yaml")["services"]["vllm"]
    assert cpu["volumes"] == plain["volumes"] and cpu["expose"] == plain["expose"]
    assert cpu["healthcheck"]["test"] == plain["healthcheck"]["test"]
    assert "deploy" not in cpu and cpu["environment"]["SPARKSERVE_DEVICE"] == "cpu"


def test_compose_format_without_a_stack_is_bad_input(capsys):
    assert main(["plan", "--format", "compose"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--format compose is for --stack" in err


def test_a_stack_that_does_not_fit_writes_no_override(tmp_path, capsys):
    stack = tmp_path / "stack.toml"
    stack.write_text(
        GPU_STACK.read_text().replace('kv_cache_memory_bytes = "2G"', "memory_share = 1")
    )
    code, text = _plan("--stack", str(stack), "--format", "compose")
    assert code == 1 and text == ""
    assert "does not fit" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["chat", "embed"])
def test_the_entrypoint_recomputes_each_models_flags_from_its_service(cpu_stack, name):
    """`python -m entrypoint --dry-run` with the service's SPARKSERVE_* settings (the
    checkpoint at its host path instead of /models) passes the stack plan's flags."""
    override, plan = cpu_stack
    services = compose_cli.resolved("compose.yaml", "compose.cpu.yaml", override)["services"]
    (model,) = [m for m in plan["models"] if m["name"] == name]
    env = dict(services[f"vllm-{name}"]["environment"])
    env.update(
        SPARKSERVE_MODEL=model["plan"]["model_dir"],
        SPARKSERVE_WEIGHTS=model["plan"]["model_dir"],
        SPARKSERVE_CACHE_DIR=str(override.parent / "cache"),
    )
    result = subprocess.run(
        [sys.executable, "-m", "entrypoint", "--dry-run"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    launched = result.stdout.strip().splitlines()[-1].split()
    launched = launched[launched.index("--model") :]
    assert launched[: len(model["vllm_args"])] == model["vllm_args"]
