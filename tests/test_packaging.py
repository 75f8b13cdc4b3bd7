"""`pip install .` ships the product and every command of it: each `--help` works from an
installed wheel, away from the checkout; bench/, reliability/, devtools/, tools/ and the
tests run from the checkout and are not in the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [
    ("budget", "plan", "--help"),
    ("entrypoint", "--help"),
    ("entrypoint.gpu_check", "--help"),
    ("gateway", "--help"),
    ("draftvocab", "--help"),
]
PRODUCT = {"budget", "entrypoint", "gateway", "draftvocab"}


def test_the_wheel_registers_the_vllm_plugin(installed: Path) -> None:
    """vLLM finds its plugins by entry point (group vllm.general_plugins)."""
    (dist,) = installed.glob("sparkserve-*.dist-info")
    entry_points = (dist / "entry_points.txt").read_text()
    assert "[vllm.general_plugins]" in entry_points
    assert "sparkserve_draft_vocab = draftvocab.plugin:register" in entry_points


def test_the_wheel_holds_the_product_packages_and_their_subpackages(installed: Path) -> None:
    top = {p.name for p in installed.iterdir() if p.is_dir() and not p.name.endswith("-info")}
    assert top == PRODUCT
    assert _modules(ROOT) == _modules(installed), _modules(ROOT) ^ _modules(installed)
    assert (installed / "budget" / "profiles" / "models").is_dir()


def _modules(root: Path) -> set[Path]:
    """Every module of the product under root (entrypoint/gpu_check/ too)."""
    return {p.relative_to(root) for name in PRODUCT for p in (root / name).rglob("*.py")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp), str(ROOT)]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    (wheel,) = tmp.glob("sparkserve-*.whl")
    site = tmp / "site"
    install = [*pip, "install", "--no-deps", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    return site


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_help_runs_from_the_installed_wheel(installed: Path, command: tuple[str, ...]) -> None:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(installed), "HOME": str(installed)}
    result = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=installed.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage:" in result.stdout
    origin = subprocess.run(
        [sys.executable, "-c", f"import {command[0]}; print({command[0]}.__file__)"],
        cwd=installed.parent, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert origin.stdout.startswith(str(installed)), origin.stdout
