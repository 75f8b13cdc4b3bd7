"""Fixtures for the gateway tests: settings, a synthetic vLLM, servers in threads."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.embedded.settings import EmbeddedSettings
from gateway.standalone.app import create_app
from gateway.standalone.settings import GatewaySettings
from tests.gateway.fake_vllm import FakeVLLM
from tests.gateway.server import serve

ALICE_KEY = "sk-alice-0123456789"
BOB_KEY = "sk-bob-0123456789"
TEST_KEYS = f"alice:{ALICE_KEY},bob:{BOB_KEY}"

MakeSettings = Callable[..., GatewaySettings]
MakeEmbeddedSettings = Callable[..., EmbeddedSettings]


@pytest.fixture
def make_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MakeSettings:
    """Settings that ignore the host's GATEWAY_* env; keyword arguments override."""
    for name in list(os.environ):
        if name.startswith("GATEWAY_"):
            monkeypatch.delenv(name)

    def make(upstream_url: str = "http://127.0.0.1:9", **overrides: Any) -> GatewaySettings:
        values: dict[str, Any] = {
            "upstream_url": upstream_url,
            "api_keys": TEST_KEYS,
            "salt_secret": "test-secret",
            "state_dir": tmp_path / "state",
        }
        values.update(overrides)
        return GatewaySettings(**values)

    return make


@pytest.fixture
def make_embedded_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MakeEmbeddedSettings:
    """The embedded gateway's settings, ignoring the host's GATEWAY_* env; keyword
    arguments override."""
    for name in list(os.environ):
        if name.startswith("GATEWAY_"):
            monkeypatch.delenv(name)

    def make(**overrides: Any) -> EmbeddedSettings:
        values: dict[str, Any] = {
            "api_keys": TEST_KEYS,
            "salt_secret": "test-secret",
            "state_dir": tmp_path / "state",
        }
        values.update(overrides)
        return EmbeddedSettings(**values)

    return make


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def fake_vllm() -> Iterator[tuple[FakeVLLM, str]]:
    fake = FakeVLLM()
    with serve(fake.app()) as url:
        try:
            yield fake, url
        finally:
            fake.release.set()


@pytest.fixture
def gateway_url(
    fake_vllm: tuple[FakeVLLM, str], make_settings: MakeSettings, registry: CollectorRegistry
) -> Iterator[str]:
    """The gateway served in a thread in front of the synthetic vLLM."""
    app = create_app(make_settings(fake_vllm[1]), registry=registry)
    with serve(app) as url:
        yield url


def auth(key: str = ALICE_KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}
