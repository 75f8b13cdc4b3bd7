"""A stand-in for vLLM's API server, for the supervisor's error paths only.

Run as `python fake_vllm.py <vLLM's argv>`: it reads `--host`/`--port`, ignores
the rest, prints a few vLLM-like lines and behaves as FAKE_VLLM_* say:

FAKE_VLLM_LISTEN=never       never serve /health (start-up timeout)
FAKE_VLLM_CONTROL_DIR=DIR    after ready: /health is 503 while DIR/unhealthy exists;
                             exit with the code written in DIR/exit once it exists
FAKE_VLLM_GRANDCHILD=1       start a long sleeper in its process group (like EngineCore)
FAKE_VLLM_IGNORE_SIGTERM=1   ignore SIGTERM (the supervisor must SIGKILL)
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

POLL_SECONDS = 0.05
SLEEPER = "import time; time.sleep(600)"


class Handler(BaseHTTPRequestHandler):
    control_dir: Path | None = None

    def do_GET(self) -> None:
        unhealthy = self.control_dir is not None and (self.control_dir / "unhealthy").exists()
        code = 503 if unhealthy or self.path != "/health" else 200
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the supervisor polls /health often."""


def say(line: str) -> None:
    print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    if os.environ.get("FAKE_VLLM_IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.environ.get("FAKE_VLLM_GRANDCHILD") == "1":
        sleeper = subprocess.Popen([sys.executable, "-c", SLEEPER])
        say(f"fake vllm: engine core pid {sleeper.pid}")
    say("fake vllm: loading weights")
    say("fake vllm: Model loading took 0.01 GiB memory")
    if os.environ.get("FAKE_VLLM_LISTEN") == "never":
        say("fake vllm: stuck before listening")
        while True:
            time.sleep(POLL_SECONDS)
    control = os.environ.get("FAKE_VLLM_CONTROL_DIR")
    Handler.control_dir = Path(control) if control else None
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    say(f"fake vllm: Starting vLLM server on http://{args.host}:{args.port}")
    exit_file = Handler.control_dir / "exit" if Handler.control_dir else None
    while exit_file is None or not exit_file.exists():
        time.sleep(POLL_SECONDS)
    code = int(exit_file.read_text())
    say(f"fake vllm: engine died, exiting {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
