"""The CPU stack as `make up-cpu` starts it, in the tests' own compose project and ports.

Never the user's `sparkserve` project: COMPOSE_PROJECT_NAME, the published ports, the
env file and the gateway key are the tests' own.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.integration.dashboards import ROOT

PROJECT = "sparkserve-test"
GATEWAY_PORT = 18080
PROMETHEUS_PORT = 19090
SERVED_MODEL = "tiny"  # the name tests/integration/traffic.py sends
ENV_NAME = "run/test-docker/env.cpu"  # relative to ROOT, as the Makefile names it
ENV_FILE = ROOT / ENV_NAME
TIMINGS_FILE = ROOT / "run" / "test-docker" / "timings.txt"  # printed in the test summary
UP_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Stack:
    key: str
    env: dict[str, str]
    timings: dict[str, float]

    @property
    def gateway(self) -> str:
        return f"http://127.0.0.1:{GATEWAY_PORT}"

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{PROMETHEUS_PORT}"


def engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def environment(key: str) -> dict[str, str]:
    return {
        **os.environ,
        "COMPOSE_PROJECT_NAME": PROJECT,
        "GATEWAY_PUBLISH": str(GATEWAY_PORT),
        "PROMETHEUS_PUBLISH": str(PROMETHEUS_PORT),
        "GATEWAY_API_KEYS": f"alice:{key},bob:{key}-bob",
        "CPU_ENV": ENV_NAME,
        "SPARKSERVE_SERVED_MODEL_NAME": SERVED_MODEL,
    }


def make(target: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", target, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT_S,
    )


# Tuning in the tests' env file: for the gateway, so that the admission panels move (one
# stream per key, one waiting, the rest refused: tests/integration/traffic.py `burst`), and
# a control poll that sees the memory watchdog within a second; for the entrypoint, a stall
# timeout that a SIGSTOPped engine reaches within the test, and a memory watchdog whose
# floor, hold and drain a test can reach in seconds (tests/docker/test_stack_memory.py).
MEMORY_FLOOR_GIB = 1.0
TUNING = {
    "GATEWAY_MAX_CONCURRENCY_PER_KEY": "1",
    "GATEWAY_QUEUE_SIZE": "1",
    "GATEWAY_THERMAL_POLL_SECONDS": "1",
    "SPARKSERVE_STALL_TIMEOUT_S": "15",
    "SPARKSERVE_MEMORY_FLOOR_GIB": f"{MEMORY_FLOOR_GIB:g}",
    "SPARKSERVE_MEMORY_HOLD_SECONDS": "4",
    "SPARKSERVE_MEMORY_DRAIN_SECONDS": "4",
}


def write_env_file(env: dict[str, str]) -> None:
    """The tests' .env.cpu as `make .env.cpu` writes it, plus the gateway tuning."""
    ENV_FILE.parent.mkdir(parents=True, exist_ok=True)
    ENV_FILE.unlink(missing_ok=True)
    result = make(ENV_NAME, env)
    assert result.returncode == 0, result.stdout + result.stderr
    set_env_lines(TUNING)


def set_env_lines(values: dict[str, str]) -> None:
    """Set these variables in the tests' env file (a line each, replacing any before)."""
    kept = [
        line for line in ENV_FILE.read_text().splitlines() if line.split("=", 1)[0] not in values
    ]
    lines = kept + [f"{name}={value}" for name, value in values.items()]
    ENV_FILE.write_text("\n".join(lines) + "\n")


def compose(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    files = ("-f", "compose.yaml", "-f", "compose.cpu.yaml")
    cmd = ["docker", "compose", "--env-file", str(ENV_FILE), *files, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def containers(env: dict[str, str]) -> list[dict[str, Any]]:
    out = compose(env, "ps", "-a", "--format", "json").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def note_timing(line: str) -> None:
    """A figure for the test summary (pytest_terminal_summary prints TIMINGS_FILE)."""
    with TIMINGS_FILE.open("a") as out:
        out.write(line + "\n")


def project_objects(kind: str) -> list[str]:
    """Containers, networks or volumes labelled with the tests' project."""
    label = f"label=com.docker.compose.project={PROJECT}"
    listing = {
        "container": ["docker", "ps", "-a", "-q", "--filter", label],
        "network": ["docker", "network", "ls", "-q", "--filter", label],
        "volume": ["docker", "volume", "ls", "-q", "--filter", label],
    }[kind]
    return subprocess.run(listing, capture_output=True, text=True, timeout=60).stdout.split()


def up() -> Iterator[Stack]:
    """Bases (once per machine), then `make up-cpu`; each step timed into TIMINGS_FILE;
    `make down` after."""
    key = f"sk-{secrets.token_hex(12)}"
    env = environment(key)
    write_env_file(env)
    timings: dict[str, float] = {}
    for name, target in (("bases", "docker-bases"), ("up-cpu", "up-cpu")):
        started = time.monotonic()
        result = make(target, env)
        timings[name] = time.monotonic() - started
        with TIMINGS_FILE.open("a") as out:
            out.write(f"make {target}: {timings[name]:.0f} s (exit {result.returncode})\n")
        if result.returncode != 0:
            make("down", env, "DOWN_ARGS=-v")
            tail = f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            raise AssertionError(f"make {target} failed:\n{tail}")
    try:
        yield Stack(key, env, timings)
    finally:
        make("down", env, "DOWN_ARGS=-v")
