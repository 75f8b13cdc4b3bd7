"""Several models behind one gateway (GATEWAY_MODELS): settings and their refusals,
routing by `model` to real in-process upstreams, the 404 of an unknown model, the
merged /v1/models, keys limited to models, admission and streaming per model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from gateway.core.errors import ConfigError
from gateway.core.tenancy import KeyTable, parse_key_spec
from gateway.embedded.middleware import EmbeddedGateway
from gateway.embedded.settings import load_embedded_settings
from gateway.standalone.app import create_app
from gateway.standalone.settings import load_settings
from tests.gateway.conftest import ALICE_KEY, BOB_KEY, MakeSettings, auth
from tests.gateway.fake_vllm import FakeVLLM
from tests.gateway.server import serve
from tests.gateway.test_admission_http import Control, _wait_for

CAROL_KEY = "sk-carol-0123456789"  # may use `chat` only
KEYS = f"alice:{ALICE_KEY},bob:{BOB_KEY},carol@chat:{CAROL_KEY}"


def _chat(model: str | None, *, stream: bool = False, system: str = "s") -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
        "stream": stream,
    }
    if model is not None:
        body["model"] = model
    return body


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GATEWAY_"):
            monkeypatch.delenv(name)


# --- settings ----------------------------------------------------------------------


def test_models_setting_parses_each_model_with_its_replicas(clean_env: None) -> None:
    settings = load_settings(
        models=" chat = http://a:8000, http://b:8000/ ; Qwen/Qwen2.5-0.5B=http://c:8000;",
        model_control_urls="chat=http://a:8081",
        model_upstream_names="chat=a,b",
        control_url="http://ctl:8081",
    )
    chat, qwen = settings.model_upstreams()
    assert (chat.name, chat.urls) == ("chat", ["http://a:8000", "http://b:8000"])
    assert chat.replica_names == ["chat/a", "chat/b"]
    assert chat.control_url == "http://a:8081"
    assert (qwen.name, qwen.urls, qwen.replica_names) == (
        "Qwen/Qwen2.5-0.5B",
        ["http://c:8000"],
        ["Qwen/Qwen2.5-0.5B/0"],
    )
    assert qwen.control_url == "http://ctl:8081"  # the shared one where none is its own


def test_upstream_url_alone_is_one_unnamed_model(clean_env: None) -> None:
    settings = load_settings(upstream_url="http://a:8000,http://b:8000", upstream_names="x,y")
    (only,) = settings.model_upstreams()
    assert (only.name, only.urls, only.replica_names) == (
        None,
        ["http://a:8000", "http://b:8000"],
        ["x", "y"],
    )
    assert settings.models == {} and settings.upstream == "http://a:8000"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"GATEWAY_MODELS": "chat=http://a:1", "GATEWAY_UPSTREAM_URL": "http://b:1"},
            "GATEWAY_MODELS and GATEWAY_UPSTREAM_URL are both set",
        ),
        ({}, "GATEWAY_UPSTREAM_URL is required"),
        ({"GATEWAY_MODELS": "http://a:1"}, "is not `model=url,url`"),
        ({"GATEWAY_MODELS": "chat="}, "model 'chat' has no URL"),
        ({"GATEWAY_MODELS": "chat=vllm:8000"}, "'vllm:8000' is not an http(s) URL"),
        ({"GATEWAY_MODELS": "c h=http://a:1"}, "model name 'c h' must match"),
        ({"GATEWAY_MODELS": "a=http://x:1;a=http://y:1"}, "model 'a' is named twice"),
        (
            {"GATEWAY_MODELS": "a=http://x:1", "GATEWAY_UPSTREAM_NAMES": "p"},
            "with GATEWAY_MODELS use GATEWAY_MODEL_UPSTREAM_NAMES",
        ),
        (
            {"GATEWAY_MODELS": "a=http://x:1", "GATEWAY_MODEL_CONTROL_URLS": "b=http://c:1"},
            "GATEWAY_MODEL_CONTROL_URLS names 'b', not in GATEWAY_MODELS (a)",
        ),
        (
            {"GATEWAY_UPSTREAM_URL": "http://x:1", "GATEWAY_MODEL_CONTROL_URLS": "a=http://c:1"},
            "GATEWAY_MODEL_CONTROL_URLS is set without GATEWAY_MODELS",
        ),
        (
            {
                "GATEWAY_MODELS": "a=http://x:1",
                "GATEWAY_MODEL_CONTROL_URLS": "a=http://c:1,http://d:1",
            },
            "model 'a' has 2 control URLs",
        ),
        (
            {"GATEWAY_MODELS": "a=http://x:1", "GATEWAY_MODEL_UPSTREAM_NAMES": "a=p,q"},
            "GATEWAY_MODEL_UPSTREAM_NAMES has 2 names for the 1 GATEWAY_MODELS replicas",
        ),
        (
            {"GATEWAY_MODELS": "a=http://x:1,http://y:1", "GATEWAY_MODEL_UPSTREAM_NAMES": "a=p,p"},
            "replica names must be distinct",
        ),
    ],
)
def test_bad_models_settings_are_one_line(
    monkeypatch: pytest.MonkeyPatch, clean_env: None, env: dict[str, str], expected: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert expected in raised.value.message
    assert "\n" not in raised.value.message


def test_module_refuses_models_with_upstream_url_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_MODELS="chat=http://a:1",
        GATEWAY_UPSTREAM_URL="http://b:1",
        GATEWAY_STATE_DIR=str(tmp_path),
    )
    result = subprocess.run(
        [sys.executable, "-m", "gateway"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "GATEWAY_MODELS and GATEWAY_UPSTREAM_URL are both set" in result.stderr


def test_embedded_gateway_refuses_models_at_start(
    monkeypatch: pytest.MonkeyPatch, clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GATEWAY_MODELS", "chat=http://a:1")
    monkeypatch.setenv("GATEWAY_AUTH", "off")
    with pytest.raises(ConfigError, match="GATEWAY_MODELS is set: the embedded gateway"):
        load_embedded_settings()
    with pytest.raises(SystemExit) as exited:
        EmbeddedGateway(Starlette())
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gateway (embedded): GATEWAY_MODELS is set")


# --- keys limited to models --------------------------------------------------------


def test_key_entries_may_name_their_models() -> None:
    assert parse_key_spec("alice:sk-1") == ("alice", "sk-1", None)
    assert parse_key_spec("sk:with:colons")[2] is None
    assert parse_key_spec("alice@chat|Qwen/Q-0.5B:sk-1") == (
        "alice",
        "sk-1",
        frozenset({"chat", "Qwen/Q-0.5B"}),
    )
    tenant, key, models = parse_key_spec("@chat:sk-bare")
    assert tenant.startswith("key-") and key == "sk-bare" and models == frozenset({"chat"})
    assert parse_key_spec("sk-bare")[0] == tenant  # the same tenant as the unlimited key
    principal = KeyTable(["bob@embed:sk-2"]).lookup("sk-2")
    assert principal is not None and principal.models == frozenset({"embed"})


@pytest.mark.parametrize("entry", ["alice@:sk-1", "alice@ch at:sk-1", "alice@chat|:sk-1"])
def test_bad_model_lists_in_keys_are_refused_without_the_key(entry: str) -> None:
    with pytest.raises(ConfigError) as raised:
        KeyTable([entry])
    assert "sk-1" not in raised.value.message and "model name" in raised.value.message


# --- the gateway in front of real in-process upstreams -----------------------------


@contextmanager
def _models_gateway(
    make_settings: MakeSettings,
    registry: CollectorRegistry,
    models: dict[str, list[FakeVLLM]],
    **overrides: Any,
) -> Iterator[str]:
    """The gateway with GATEWAY_MODELS naming `models`' fakes, each served on a port."""
    with ExitStack() as stack:
        spec = ";".join(
            name + "=" + ",".join(stack.enter_context(serve(fake.app())) for fake in fakes)
            for name, fakes in models.items()
        )
        values: dict[str, Any] = {"upstream_url": None, "models": spec, "api_keys": KEYS}
        settings = make_settings(**(values | overrides))
        yield stack.enter_context(serve(create_app(settings, registry=registry)))


def _assert_model_not_found(response: httpx.Response, listed: str) -> None:
    assert response.status_code == 404
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        "model",
        "model_not_found",
    )
    assert error["message"].endswith(f"the models: {listed}.")


def test_each_model_reaches_only_its_replicas(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    chat = [FakeVLLM(), FakeVLLM()]
    embed = FakeVLLM()
    with _models_gateway(make_settings, registry, {"chat": chat, "embed": [embed]}) as url:
        with httpx.Client(base_url=url, headers=auth()) as client:
            for session in range(8):
                body = _chat("chat", system=f"agent {session}")
                assert client.post("/v1/chat/completions", json=body).status_code == 200
            embedded = client.post("/v1/embeddings", json={"model": "embed", "input": "x"})
            tokenized = client.post("/tokenize", json={"model": "chat", "prompt": "x"})
    assert embedded.status_code == 200 and tokenized.status_code == 200
    assert "cache_salt" in embedded.json()["echo"]  # the tenant's salt, per model too
    assert len(chat[0].requests) + len(chat[1].requests) == 9
    assert chat[0].requests and chat[1].requests  # affinity spreads chat's prefixes
    assert [r["model"] for r in embed.requests] == ["embed"]
    ok = {
        name: _sample(registry, "gateway_upstream_requests_total", replica=name, outcome="ok")
        for name in ("chat/0", "chat/1", "embed/0")
    }
    assert ok["chat/0"] + ok["chat/1"] == 9 and ok["embed/0"] == 1


def test_unknown_or_missing_model_is_404_listing_the_models(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    fakes = {"chat": [FakeVLLM()], "embed": [FakeVLLM()]}
    with _models_gateway(make_settings, registry, fakes) as url:
        unknown = httpx.post(f"{url}/v1/chat/completions", json=_chat("gpt-4"), headers=auth())
        missing = httpx.post(f"{url}/v1/chat/completions", json=_chat(None), headers=auth())
    _assert_model_not_found(unknown, "chat, embed")
    assert "'gpt-4' does not exist" in unknown.json()["error"]["message"]
    _assert_model_not_found(missing, "chat, embed")
    assert not fakes["chat"][0].requests and not fakes["embed"][0].requests
    assert _sample(registry, "gateway_rejected_total", reason="model_not_found") == 2
    assert _sample(registry, "gateway_requests_total", route="/v1/chat/completions",
                   status_class="4xx") == 2  # fmt: skip


def test_the_only_model_serves_a_request_without_model(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    fake = FakeVLLM()
    with _models_gateway(make_settings, registry, {"chat": [fake]}) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=_chat(None), headers=auth())
    assert response.status_code == 200 and len(fake.requests) == 1


def test_models_lists_every_model_merged_or_as_configured(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    chat = FakeVLLM(served=("chat", "chat-lora"))
    other = FakeVLLM(served=("something-else",))
    down = f"http://127.0.0.1:{_free_port()}"
    with ExitStack() as stack:
        chat_url = stack.enter_context(serve(chat.app()))
        other_url = stack.enter_context(serve(other.app()))
        spec = f"chat={chat_url};embed={down};rerank={other_url}"
        settings = make_settings(upstream_url=None, models=spec, api_keys=KEYS)
        url = stack.enter_context(serve(create_app(settings, registry=registry)))
        listed = httpx.get(f"{url}/v1/models", headers=auth()).json()
        limited = httpx.get(f"{url}/v1/models", headers=auth(CAROL_KEY)).json()
    configured = {"object": "model", "created": 0, "owned_by": "sparkserve"}
    assert listed == {
        "object": "list",
        "data": [
            {"id": "chat", "object": "model", "max_model_len": 2048},  # as its upstream says
            {"id": "embed", **configured},  # its upstream is down
            {"id": "rerank", **configured},  # its upstream does not serve the name
        ],
    }
    assert [entry["id"] for entry in limited["data"]] == ["chat"]


def test_a_key_limited_to_one_model_is_refused_on_the_other(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    fakes = {"chat": [FakeVLLM()], "embed": [FakeVLLM()]}
    with _models_gateway(make_settings, registry, fakes) as url:
        allowed = httpx.post(
            f"{url}/v1/chat/completions", json=_chat("chat"), headers=auth(CAROL_KEY)
        )
        refused = httpx.post(
            f"{url}/v1/embeddings", json={"model": "embed", "input": "x"}, headers=auth(CAROL_KEY)
        )
        unknown = httpx.post(
            f"{url}/v1/chat/completions", json=_chat("gpt-4"), headers=auth(CAROL_KEY)
        )
        alone = httpx.post(f"{url}/v1/chat/completions", json=_chat(None), headers=auth(CAROL_KEY))
    assert allowed.status_code == 200
    _assert_model_not_found(refused, "chat")  # the key's models only: `embed` not named
    _assert_model_not_found(unknown, "chat")
    assert "embed" not in refused.json()["error"]["message"].split("the models:")[1]
    _assert_model_not_found(alone, "chat")  # a limited key names its model
    assert not fakes["embed"][0].requests and len(fakes["chat"][0].requests) == 1


def test_a_limited_key_is_held_to_its_models_with_one_upstream_too(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    fake, upstream = fake_vllm
    settings = make_settings(upstream, api_keys=KEYS)
    with serve(create_app(settings, registry=registry)) as url:
        ok = httpx.post(f"{url}/v1/chat/completions", json=_chat("chat"), headers=auth(CAROL_KEY))
        refused = httpx.post(
            f"{url}/v1/chat/completions", json=_chat("tiny"), headers=auth(CAROL_KEY)
        )
        anyone = httpx.post(f"{url}/v1/chat/completions", json=_chat("tiny"), headers=auth())
    assert ok.status_code == 200 and anyone.status_code == 200
    _assert_model_not_found(refused, "chat")
    assert [r["model"] for r in fake.requests] == ["chat", "tiny"]


def test_a_full_queue_on_one_model_does_not_refuse_another(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    chat, embed = FakeVLLM(hold=True), FakeVLLM()
    overrides = {"max_concurrency": 1, "queue_size": 0}
    with _models_gateway(
        make_settings, registry, {"chat": [chat], "embed": [embed]}, **overrides
    ) as url:
        body = _chat("chat", stream=True)
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=auth()) as held:
            lines = held.iter_lines()  # keep it: a dropped iterator closes the connection
            next(lines)
            refused = httpx.post(f"{url}/v1/chat/completions", json=body, headers=auth(BOB_KEY))
            other = httpx.post(
                f"{url}/v1/chat/completions",
                json=_chat("embed", stream=True),
                headers=auth(BOB_KEY),
            )
            limit = _sample(registry, "gateway_concurrency_limit")
            chat.release.set()
    assert refused.status_code == 429
    assert other.status_code == 200 and other.text.endswith("data: [DONE]\n\n")
    assert limit == 2  # the sum of the two models' limits
    assert _sample(registry, "gateway_rejected_total", reason="queue_full") == 1


def test_streams_pass_through_per_model(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    chat, embed = FakeVLLM(events=4), FakeVLLM(events=2)
    with _models_gateway(make_settings, registry, {"chat": [chat], "embed": [embed]}) as url:
        streams = {}
        for model in ("chat", "embed"):
            body = _chat(model, stream=True)
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=auth()) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                streams[model] = [line for line in r.iter_lines() if line]
    for model, events in (("chat", 4), ("embed", 2)):
        lines = streams[model]
        assert lines[-1] == "data: [DONE]"
        assert len(lines) == events + 1  # the usage chunk the gateway asked for is dropped
        assert '"usage"' not in "".join(lines)
    assert len(chat.requests) == 1 and len(embed.requests) == 1
    assert chat.requests[0]["stream_options"]["include_usage"] is True


def test_readyz_is_ready_when_every_model_is(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    down = f"http://127.0.0.1:{_free_port()}"
    with ExitStack() as stack:
        up = stack.enter_context(serve(FakeVLLM().app()))
        both_up = make_settings(upstream_url=None, models=f"chat={up};embed={up}", api_keys=KEYS)
        one_down = make_settings(upstream_url=None, models=f"chat={up};embed={down}", api_keys=KEYS)
        ready = stack.enter_context(serve(create_app(both_up, registry=CollectorRegistry())))
        not_ready = stack.enter_context(serve(create_app(one_down, registry=registry)))
        answers = httpx.get(f"{ready}/readyz"), httpx.get(f"{not_ready}/readyz")
    assert answers[0].status_code == 200
    assert answers[0].json() == {
        "status": "ready",
        "models": {
            "chat": {"status": "ready", "replicas": {"chat/0": "healthy"}},
            "embed": {"status": "ready", "replicas": {"embed/0": "healthy"}},
        },
    }
    assert answers[1].status_code == 503
    assert answers[1].json()["models"]["embed"]["status"] == "unavailable"
    assert _sample(registry, "gateway_upstream_healthy", replica="embed/0") == 0


def test_a_models_control_endpoint_drives_only_that_models_admission(
    make_settings: MakeSettings, registry: CollectorRegistry
) -> None:
    """chat's entrypoint runs hot and short of memory: chat's limit halves and its new
    requests get 503; embed (no control endpoint) keeps its limit and serves."""
    control = Control(celsius=90, ready=True, memory_low=1)
    overrides = {
        "max_concurrency": 8,
        "thermal_threshold_celsius": 85,
        "thermal_poll_seconds": 0.02,
    }
    with serve(control.app()) as control_url:
        fakes = {"chat": [FakeVLLM()], "embed": [FakeVLLM()]}
        with _models_gateway(
            make_settings,
            registry,
            fakes,
            model_control_urls=f"chat={control_url}",
            **overrides,
        ) as url:
            assert _wait_for(registry, 4 + 8)  # chat throttled to 4, embed at 8
            assert _wait_for(registry, 1, "gateway_memory_low")
            chat = httpx.post(f"{url}/v1/chat/completions", json=_chat("chat"), headers=auth())
            embed = httpx.post(f"{url}/v1/chat/completions", json=_chat("embed"), headers=auth())
            ready = httpx.get(f"{url}/readyz").json()["models"]
    assert chat.status_code == 503 and chat.json()["error"]["code"] == "memory_low"
    assert embed.status_code == 200
    assert ready["chat"] == {"status": "ready"}  # its control endpoint's /ready
    assert ready["embed"]["replicas"] == {"embed/0": "healthy"}
