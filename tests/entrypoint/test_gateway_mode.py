"""SPARKSERVE_GATEWAY=embedded without starting vLLM: the flag, the bypass token kept
out of the launch line, the settings checked in pre-flight, clashes refused.

The mode itself, a real vLLM started by the entrypoint with the gateway inside it, is
tested in tests/gateway/test_embedded_vllm.py."""

import pytest

from entrypoint.config import load_config
from entrypoint.errors import ConfigError, PreflightError
from entrypoint.gateway_mode import (
    BYPASS_ENV,
    bypass_headers,
    check_embedded,
    check_key_in_config_file,
)
from tests.entrypoint.test_cli import run_entrypoint


def test_dry_run_adds_the_middleware_and_hides_the_token(tiny_model_dir):
    settings = {
        "SPARKSERVE_MODEL": str(tiny_model_dir),
        "SPARKSERVE_KV_CACHE_MEMORY_BYTES": "256M",
        "GATEWAY_AUTH": "off",
    }
    done = run_entrypoint("--dry-run", SPARKSERVE_GATEWAY="embedded", **settings)
    assert done.returncode == 0, done.stderr
    command = done.stdout.splitlines()[-1]
    assert "--middleware gateway.embedded.EmbeddedGateway" in command
    assert f"{BYPASS_ENV}=***" in command
    plain = run_entrypoint("--dry-run", **settings)
    assert plain.returncode == 0 and "--middleware" not in plain.stdout
    assert BYPASS_ENV not in plain.stdout


def test_a_bad_gateway_setting_fails_pre_flight_in_one_line(tiny_model_dir):
    """What vLLM's process would stop on is found before vLLM is started."""
    done = run_entrypoint(
        SPARKSERVE_MODEL=str(tiny_model_dir),
        SPARKSERVE_KV_CACHE_MEMORY_BYTES="256M",
        SPARKSERVE_GATEWAY="embedded",
        GATEWAY_AUTH="on",
        GATEWAY_API_KEYS="",
        GATEWAY_API_KEYS_FILE="",
        SPARKSERVE_LOAD_FORMAT="dummy",  # the tiny directory holds no weights
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SPARKSERVE_GATEWAY=embedded: GATEWAY_AUTH=on needs" in lines[0]
    assert "launching" not in done.stdout


def test_settings_are_checked_as_vllms_process_reads_them(monkeypatch, tmp_path):
    config = load_config({"SPARKSERVE_GATEWAY": "embedded"})
    for name in ("GATEWAY_UPSTREAM_URL", "GATEWAY_API_KEYS", "GATEWAY_API_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GATEWAY_API_KEYS", "team-a:sk-a")
    check_embedded(config)  # no upstream URL needed: vLLM is the upstream
    assert (tmp_path / "salt_secret").exists()
    monkeypatch.setenv("GATEWAY_LAYOUT_RULES", '{"ticket": "TICKET-[0-9"}')
    with pytest.raises(PreflightError, match="GATEWAY_LAYOUT_RULES.*bad regex"):
        check_embedded(config)
    check_embedded(load_config({}))  # off: nothing read


def test_vllms_own_key_beside_the_gateway_is_refused():
    with pytest.raises(ConfigError, match="unset SPARKSERVE_API_KEY"):
        load_config({"SPARKSERVE_GATEWAY": "embedded", "SPARKSERVE_API_KEY": "sk-x"})
    with pytest.raises(ConfigError, match="SPARKSERVE_GATEWAY='inside': must be one of"):
        load_config({"SPARKSERVE_GATEWAY": "inside"})


def test_the_bypass_header_comes_only_from_the_launch():
    assert bypass_headers({}) == {}
    assert bypass_headers({BYPASS_ENV: "t0k"}) == {"x-sparkserve-bypass": "t0k"}


@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        ("--api-server-count 2", "--api-server-count 2"),
        ("--api_server_count=4", "--api-server-count 4"),
        ("-asc 1 --max-num-seqs 8 -asc 3", "--api-server-count 3"),
        ("--data-parallel-size 2", "--data-parallel-size 2, which starts"),
        ("-dp=2", "--data-parallel-size 2, which starts"),
        ("-asc 1", None),
        ("--data-parallel-size 2 --api-server-count 1", None),
        ("--data-parallel-size 1", None),
        ("--max-num-seqs 2", None),
    ],
)
def test_more_than_one_api_server_is_refused(monkeypatch, tmp_path, extra, refused):
    """vLLM's admission slots and the gateway's histograms live in one API server
    process: flags that start several are refused before vLLM starts."""
    _embedded_preflight(monkeypatch, tmp_path, extra, "SPARKSERVE_VLLM_EXTRA_ARGS", refused)
    check_embedded(load_config({"SPARKSERVE_VLLM_EXTRA_ARGS": extra}))  # off: allowed


def _embedded_preflight(monkeypatch, tmp_path, extra, where, refused):
    """The embedded pre-flight with `extra` as SPARKSERVE_VLLM_EXTRA_ARGS: passes when
    `refused` is None, else fails saying `where` has `refused`, and what to do."""
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GATEWAY_API_KEYS", "team-a:sk-a")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    config = load_config({"SPARKSERVE_GATEWAY": "embedded", "SPARKSERVE_VLLM_EXTRA_ARGS": extra})
    if refused is None:
        check_embedded(config)
        return
    with pytest.raises(PreflightError) as error:
        check_embedded(config)
    message = str(error.value)
    assert f"{where} has {refused}" in message
    assert "add --api-server-count 1, or use the standalone gateway" in message


@pytest.mark.parametrize(
    ("yaml_text", "extra", "refused"),
    [
        ("api-server-count: 2\nmax-num-seqs: 8\n", "", "--api-server-count 2"),
        ("api_server_count: 4\n", "--max-num-seqs 8", "--api-server-count 4"),
        ("data-parallel-size: 2\n", "", "--data-parallel-size 2, which starts"),
        ("data-parallel-size: 2\napi-server-count: 1\n", "", None),
        ("api-server-count: 2\n", "--api-server-count 1", None),  # the command line wins
        ("data-parallel-size: 2\n", "-asc 1", None),
        ("enforce-eager: true\nmax-num-seqs: 8\nserved-model-name: [a, b]\n", "", None),
    ],
)
def test_a_config_file_that_starts_several_api_servers_is_refused(
    monkeypatch, tmp_path, yaml_text, extra, refused
):
    """vLLM's `--config FILE` flags count as vLLM's parser reads them: first, so the
    command line wins over the file."""
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml_text)
    args = f"--config {path} {extra}".strip()
    where = f"SPARKSERVE_VLLM_EXTRA_ARGS (its --config {path})"
    _embedded_preflight(monkeypatch, tmp_path, args, where, refused)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read it as YAML (FileNotFoundError"),
        ("a: [unclosed\n", "cannot read it as YAML (ParserError"),
        ("- api-server-count\n", "expected a mapping of vLLM flags to values"),
        (b"\xff\xfe", "cannot read it as YAML (UnicodeDecodeError"),
    ],
)
def test_an_unreadable_config_file_is_named_in_pre_flight(monkeypatch, tmp_path, content, reason):
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GATEWAY_API_KEYS", "team-a:sk-a")
    path = tmp_path / "vllm.yaml"
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    extra = f"--config={path}"
    config = load_config({"SPARKSERVE_GATEWAY": "embedded", "SPARKSERVE_VLLM_EXTRA_ARGS": extra})
    with pytest.raises(PreflightError) as error:
        check_embedded(config)
    message = str(error.value)
    assert f"SPARKSERVE_VLLM_EXTRA_ARGS --config {path}: {reason}" in message
    assert "\n" not in message


def test_vllms_multiprocess_metrics_are_refused_in_pre_flight(monkeypatch, tmp_path):
    """Set by hand (or by vLLM for its API servers), PROMETHEUS_MULTIPROC_DIR makes
    vLLM's /metrics read other files than the gateway's registry."""
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GATEWAY_API_KEYS", "team-a:sk-a")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "prom"))
    with pytest.raises(PreflightError, match="PROMETHEUS_MULTIPROC_DIR is set"):
        check_embedded(load_config({"SPARKSERVE_GATEWAY": "embedded"}))


@pytest.mark.parametrize(
    ("yaml_text", "refused"),
    [
        ("api-key: sk-x\n", True),
        ("api_key: [sk-a, sk-b]\nmax-num-seqs: 8\n", True),
        ("max-num-seqs: 8\nserved-model-name: [a, b]\n", False),
    ],
)
def test_a_key_in_vllms_config_file_is_refused(tmp_path, yaml_text, refused):
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml_text)
    if not refused:
        check_key_in_config_file(["--config", str(path)])
        return
    with pytest.raises(PreflightError, match="sets api-key") as error:
        check_key_in_config_file([f"--config={path}", "--enforce-eager"])
    assert "sk-" not in str(error.value) and "SPARKSERVE_API_KEY" in str(error.value)
    check_key_in_config_file(["--enforce-eager"])  # no file: nothing to read
