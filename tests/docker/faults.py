"""Faults made inside a vLLM container, and what the tests read back: restart counts,
`make doctor`'s report, a stream running through the gateway meanwhile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import httpx

from tests.docker import stack as st
from tests.integration.dashboards import ROOT

# Run with the image's python3 (psutil is the entrypoint's dependency): `main` = the
# entrypoint's children (vLLM's API server), else the processes whose name or command
# line holds the argument; the second argument is the psutil.Process method to call.
SCRIPT = (
    "import os, psutil, sys\n"
    "procs = [p for p in psutil.process_iter(['name', 'cmdline']) if p.pid != os.getpid()]\n"
    "def text(p): return (p.info['name'] or '') + ' ' + ' '.join(p.info['cmdline'] or [])\n"
    "if sys.argv[1] == 'main':\n"
    "    (entry,) = [p for p in procs if '-m entrypoint' in text(p)]\n"
    "    found = entry.children()\n"
    "else:\n"
    "    found = [p for p in procs if sys.argv[1] in text(p)]\n"
    "if sys.argv[2] == 'pids':\n"
    "    print(' '.join(str(p.pid) for p in found))\n"
    "else:\n"
    "    [getattr(p, sys.argv[2])() for p in found]\n"
    "    print(len(found))\n"
)


def make_fault(env: dict[str, str], target: str, action: str, index: int = 1) -> None:
    """`action` (kill, suspend) on `target` in the `index`-th vllm container."""
    made = st.compose(
        env, "exec", "-T", "--index", str(index), "vllm", "python3", "-c", SCRIPT, target, action
    )
    assert made.returncode == 0 and int(made.stdout.strip() or 0) >= 1, made


def find(env: dict[str, str], target: str, index: int = 1) -> list[str]:
    """The pids SCRIPT matches in the `index`-th vllm container (looked up ahead of a
    fault that must land within a second, e.g. while a short stream runs)."""
    found = st.compose(
        env, "exec", "-T", "--index", str(index), "vllm", "python3", "-c", SCRIPT, target, "pids"
    )
    assert found.returncode == 0 and found.stdout.split(), found
    return found.stdout.split()


def send_later(
    env: dict[str, str], signal_name: str, pids: list[str], delay_s: float, index: int = 1
) -> None:
    """`kill -SIGNAL pids` in the container `delay_s` from now, from a process started
    there now: started while the machine is idle, it lands on time. (Under a stream, vLLM
    keeps both cores busy and `docker exec` itself took 9 s, long enough for a
    4,000-token stream to finish before the signal.)"""
    name = str(container(env, "vllm", index)["Name"])
    command = f"sleep {delay_s:g}; kill -{signal_name} {' '.join(pids)}"
    sent = subprocess.run(
        ["docker", "exec", "-d", name, "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sent.returncode == 0, sent


def container(env: dict[str, str], service: str, index: int = 1) -> dict[str, object]:
    (found,) = [
        c for c in st.containers(env) if c["Service"] == service and c["Name"].endswith(f"-{index}")
    ]
    return found


def restart_count(env: dict[str, str], service: str = "vllm", index: int = 1) -> int:
    name = str(container(env, service, index)["Name"])
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{.RestartCount}}", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return int(out.stdout.strip())


def exit_codes(name: str, since: float) -> list[int]:
    """The exit code of each time container `name` stopped since `since` (epoch seconds),
    from the engine's events: `docker inspect` shows 0 again once it has restarted."""
    events = subprocess.run(
        ["docker", "events", "--since", f"{since:.0f}", "--until", f"{time.time():.0f}",
         "--filter", f"container={name}", "--filter", "event=die",
         "--format", "{{.Actor.Attributes.exitCode}}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return [int(code) for code in events.stdout.split()]


@dataclass(frozen=True)
class DoctorReport:
    code: int
    text: str

    def row(self, container_name: str) -> list[str]:
        """SERVICE STATE HEALTH RESTARTS EXIT CONTAINER of one container."""
        (line,) = [line for line in self.text.splitlines() if line.endswith(container_name)]
        return line.split()

    def error_lines(self, service: str) -> list[str]:
        lines = self.text.splitlines()
        if f"{service}: last error lines" not in lines:
            return []
        start = lines.index(f"{service}: last error lines") + 1
        return [line.strip() for line in lines[start:] if line.startswith("  ")]


def doctor(project: str | None = None) -> DoctorReport:
    """`make doctor`'s program, as a user runs it against the engine: for the tests'
    stack through COMPOSE_PROJECT_NAME, as `make doctor` after `make up-cpu` in that
    project; for another project with --project."""
    args = [] if project is None else ["--project", project]
    result = subprocess.run(
        [sys.executable, "-m", "tools.doctor", *args],
        cwd=ROOT,
        env={**os.environ, "COMPOSE_PROJECT_NAME": st.PROJECT},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return DoctorReport(result.returncode, result.stdout + result.stderr)


@dataclass
class Stream:
    """A long chat stream through the gateway in a thread: its `data:` events, and how
    it ended (`complete` or the httpx error's name)."""

    gateway: str
    key: str
    max_tokens: int
    events: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        body = {
            "model": st.SERVED_MODEL,
            "messages": [{"role": "user", "content": "count"}],
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
        headers = {"Authorization": f"Bearer {self.key}"}
        url = f"{self.gateway}/v1/chat/completions"
        try:
            with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as answer:
                for line in answer.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(line.removeprefix("data: "))
            self.ended.append("complete")
        except httpx.HTTPError as exc:
            self.ended.append(type(exc).__name__)

    def wait_for_events(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.events and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.events, "no event from the stream"

    def chunks(self) -> list[dict[str, object]]:
        """Every event but [DONE], each parsed (a malformed one fails the test)."""
        return [json.loads(data) for data in self.events if data != "[DONE]"]
