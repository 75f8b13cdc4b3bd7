"""A stand-in for `python -m entrypoint` in sweep tests (no vLLM).

FAKE_LAUNCHER_MODE=exit: print a line and exit 3 (vLLM died).
FAKE_LAUNCHER_MODE=ready: answer 200 on /ready of SPARKSERVE_CONTROL_PORT until SIGTERM.
"""

import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Ready(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/ready" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    print(f"fake launcher MTP={os.environ.get('SPARKSERVE_MTP')}", flush=True)
    if os.environ.get("FAKE_LAUNCHER_MODE") == "exit":
        print("vLLM exited with code 1: engine core died", flush=True)
        sys.exit(3)
    server = HTTPServer(("127.0.0.1", int(os.environ["SPARKSERVE_CONTROL_PORT"])), Ready)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
