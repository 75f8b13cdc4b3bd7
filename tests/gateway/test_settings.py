"""GatewaySettings: env parsing, validation messages, and `python -m gateway` on bad config."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.core.errors import ConfigError
from gateway.edge.settings import CommonSettings
from gateway.embedded.settings import EmbeddedSettings, load_embedded_settings
from gateway.standalone.settings import GatewaySettings, load_settings
from tests.gateway.conftest import MakeSettings


def test_defaults_and_upstream_list(make_settings: MakeSettings) -> None:
    settings = make_settings("http://a:8000/, http://b:8000")
    assert settings.upstream_url == ["http://a:8000", "http://b:8000"]
    assert settings.upstream == "http://a:8000"
    assert (settings.port, settings.auth, settings.layout) == (8080, "on", "on")
    assert settings.keepalive_seconds == 75  # past httpx's 5 s and aiohttp's 15 s


def test_reads_environment(monkeypatch: pytest.MonkeyPatch, make_settings: MakeSettings) -> None:
    monkeypatch.setenv("GATEWAY_UPSTREAM_URL", "http://vllm:8000")
    monkeypatch.setenv("GATEWAY_PORT", "9000")
    monkeypatch.setenv("GATEWAY_LAYOUT", "off")
    monkeypatch.setenv("GATEWAY_LAYOUT_RULES", '{"ticket": "TICKET-[0-9]+"}')
    settings = load_settings()
    assert (settings.upstream, settings.port, settings.layout) == ("http://vllm:8000", 9000, "off")
    assert settings.layout_rules == {"ticket": "TICKET-[0-9]+"}


def test_an_empty_optional_variable_means_unset(
    monkeypatch: pytest.MonkeyPatch, make_settings: MakeSettings
) -> None:
    """`GATEWAY_X=` (compose's `${GATEWAY_X:-}`) is not the current directory as a key
    file, an empty salt secret, an empty upstream key or an empty bypass token."""
    monkeypatch.setenv("GATEWAY_UPSTREAM_URL", "http://vllm:8000")
    for name in (
        "GATEWAY_API_KEYS_FILE",
        "GATEWAY_SALT_SECRET",
        "GATEWAY_UPSTREAM_API_KEY",
        "GATEWAY_EMBEDDED_BYPASS_TOKEN",
        "GATEWAY_CONTROL_URL",
    ):
        monkeypatch.setenv(name, " ")
    settings = load_settings()
    assert settings.api_keys_file is None and settings.salt_secret is None
    assert settings.upstream_api_key is None and settings.control_url is None
    embedded = load_embedded_settings()
    assert embedded.api_keys_file is None and embedded.salt_secret is None
    assert embedded.embedded_bypass_token is None and embedded.control_url is None


def test_embedded_settings_need_no_upstream_url(make_settings: MakeSettings) -> None:
    """The embedded gateway has no upstream to name: nothing is required."""
    settings = load_embedded_settings()
    assert not hasattr(settings, "upstream_url")
    assert settings.embedded_passthrough == ["/v1/models", "/detokenize"]


def test_embedded_settings_ignore_standalone_only_variables(
    monkeypatch: pytest.MonkeyPatch, make_settings: MakeSettings
) -> None:
    """Values the standalone gateway would refuse are not the embedded one's concern."""
    for name, value in {
        "GATEWAY_UPSTREAM_URL": "not-a-url",
        "GATEWAY_UPSTREAM_NAMES": "a,a",
        "GATEWAY_UPSTREAM_CLIENT": "httpx",
        "GATEWAY_HOST": "",
        "GATEWAY_PORT": "not-a-port",
        "GATEWAY_READ_TIMEOUT_SECONDS": "-1",
        "GATEWAY_HEALTH_INTERVAL_SECONDS": "0",
        "GATEWAY_LOG_LEVEL": "loud",
        "GATEWAY_MAX_CONCURRENCY": "7",
    }.items():
        monkeypatch.setenv(name, value)
    settings = load_embedded_settings()
    assert settings.max_concurrency == 7  # a shared variable is read
    assert {"upstream_url", "port", "upstream_client"}.isdisjoint(type(settings).model_fields)


def test_standalone_settings_ignore_embedded_only_variables(
    monkeypatch: pytest.MonkeyPatch, make_settings: MakeSettings
) -> None:
    monkeypatch.setenv("GATEWAY_UPSTREAM_URL", "http://vllm:8000")
    monkeypatch.setenv("GATEWAY_EMBEDDED_PASSTHROUGH", "/detokenize,v1/messages")
    monkeypatch.setenv("GATEWAY_EMBEDDED_BYPASS_TOKEN", "t")
    settings = load_settings()
    assert not any(name.startswith("embedded_") for name in type(settings).model_fields)
    expected = "GATEWAY_EMBEDDED_PASSTHROUGH=.*'v1/messages' is neither a path such as /detokenize"
    with pytest.raises(ConfigError, match=expected):
        load_embedded_settings()


def test_both_faces_share_one_slice() -> None:
    shared = set(CommonSettings.model_fields)
    assert shared <= set(GatewaySettings.model_fields)
    assert shared <= set(EmbeddedSettings.model_fields)
    assert set(GatewaySettings.model_fields) & set(EmbeddedSettings.model_fields) == shared


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "GATEWAY_UPSTREAM_URL is required"),
        ({"GATEWAY_UPSTREAM_URL": "vllm:8000"}, "GATEWAY_UPSTREAM_URL='vllm:8000'"),
        ({"GATEWAY_AUTH": "maybe"}, "GATEWAY_AUTH='maybe': Input should be 'on' or 'off'"),
        ({"GATEWAY_LAYOUT": "yes"}, "GATEWAY_LAYOUT='yes': Input should be 'on' or 'off'"),
        ({"GATEWAY_PORT": "0"}, "GATEWAY_PORT='0'"),
        ({"GATEWAY_LAYOUT_RULES": "{bad"}, "GATEWAY_LAYOUT_RULES='{bad': not JSON"),
        ({"GATEWAY_LAYOUT_RULES": '{"x": "("}'}, "bad regex"),
        ({"GATEWAY_CONTROL_URL": "nope"}, "GATEWAY_CONTROL_URL='nope'"),
        ({"GATEWAY_KEEPALIVE_SECONDS": "0"}, "GATEWAY_KEEPALIVE_SECONDS='0'"),
    ],
)
def test_errors_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, make_settings: MakeSettings, env: dict[str, str], expected: str
) -> None:
    if "GATEWAY_UPSTREAM_URL" not in env and env:
        monkeypatch.setenv("GATEWAY_UPSTREAM_URL", "http://vllm:8000")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace("{", r"\{")):
        load_settings()


def test_secret_values_are_never_echoed(
    monkeypatch: pytest.MonkeyPatch, make_settings: MakeSettings
) -> None:
    monkeypatch.setenv("GATEWAY_UPSTREAM_URL", "http://vllm:8000")
    monkeypatch.setenv("GATEWAY_API_KEYS", "alice:sk-secret")
    settings = load_settings()
    assert "sk-secret" not in repr(settings)


def _run_gateway(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    clean.update(env, GATEWAY_STATE_DIR=str(tmp_path))
    return subprocess.run(
        [sys.executable, "-m", "gateway"], env=clean, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "GATEWAY_UPSTREAM_URL is required"),
        ({"GATEWAY_UPSTREAM_URL": "http://x:1"}, "GATEWAY_AUTH=on needs GATEWAY_API_KEYS"),
        (
            {"GATEWAY_UPSTREAM_URL": "http://x:1", "GATEWAY_API_KEYS_FILE": "/nonexistent"},
            "cannot read",
        ),
    ],
)
def test_module_exits_2_with_one_line(tmp_path: Path, env: dict[str, str], expected: str) -> None:
    result = _run_gateway(env, tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and expected in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_module_stops_cleanly_with_exit_0_on_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    """`docker stop` sends SIGTERM: a graceful stop is exit code 0, not 143."""
    port = _free_port()
    env = _gateway_env(port, tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-m", "gateway"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            pytest.fail("the gateway did not come up")
        child.send_signal(sig)
        _, stderr = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, stderr.decode()[-2000:]
    assert b"Traceback" not in stderr


def _gateway_env(port: int, tmp_path: Path) -> dict[str, str]:
    """The environment of a `python -m gateway` on `port` with no upstream and auth off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_UPSTREAM_URL="http://127.0.0.1:9",
        GATEWAY_AUTH="off",
        GATEWAY_HOST="127.0.0.1",
        GATEWAY_PORT=str(port),
        GATEWAY_STATE_DIR=str(tmp_path),
    )
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _idle_seconds_until_closed(
    keepalive: str | None, tmp_path: Path, wait_s: float
) -> float | None:
    """Start `python -m gateway` (with GATEWAY_KEEPALIVE_SECONDS unless None), make one
    request on a raw keep-alive connection, and return how long the idle connection
    stayed open (None: still open after `wait_s`)."""
    port = _free_port()
    env = _gateway_env(port, tmp_path)
    if keepalive is not None:
        env["GATEWAY_KEEPALIVE_SECONDS"] = keepalive
    child = subprocess.Popen([sys.executable, "-m", "gateway"], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "the gateway did not come up"
                time.sleep(0.1)
        with conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\n\r\n")
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                chunk = conn.recv(4096)
                assert chunk, f"closed before the answer ended: {answer!r}"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200")
            idle_from = time.monotonic()
            conn.settimeout(wait_s)
            try:
                rest = conn.recv(1)
            except TimeoutError:
                return None
            assert rest == b"", rest  # the server closed it: end of stream
            return time.monotonic() - idle_from
    finally:
        child.terminate()
        child.communicate(timeout=30)


def test_idle_client_connections_close_after_the_keepalive_setting(tmp_path: Path) -> None:
    closed_after = _idle_seconds_until_closed("1", tmp_path, wait_s=4.0)
    assert closed_after is not None and 0.5 < closed_after < 3.0  # uvicorn's own: 5 s


def test_by_default_an_idle_connection_outlives_httpx_expiry(tmp_path: Path) -> None:
    assert _idle_seconds_until_closed(None, tmp_path, wait_s=6.0) is None


def test_help_lists_every_setting_with_nothing_set() -> None:
    env = {"PATH": os.environ["PATH"]}  # no GATEWAY_* at all
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--help"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    listed = set(re.findall(r"^  (GATEWAY_[A-Z0-9_]+) \[", result.stdout, re.M))
    assert listed == {f"GATEWAY_{name.upper()}" for name in GatewaySettings.model_fields}
    assert "GATEWAY_UPSTREAM_URL [required]" in result.stdout


def test_arguments_other_than_help_are_refused_in_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--port", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "GATEWAY_*" in result.stderr
