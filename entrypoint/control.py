"""The entrypoint's control endpoint: `/ready` (200 only when ready) and `/metrics`.

A ThreadingHTTPServer in a daemon thread of the entrypoint process, so it answers
(503) from the first moment, through start-up and warm-up, and while stopping.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from entrypoint.state import Lifecycle

POLL_SECONDS = 0.1  # how soon close() returns


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    lifecycle: Lifecycle
    registry: CollectorRegistry

    def handle_error(self, request: object, client_address: object) -> None:
        """A scraper that gave up (timeout) closes its socket mid-answer: not an error
        worth a traceback in the container log; anything else still is."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/ready":
            self._ready()
        elif path == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        else:
            self._send(404, b"not found: try /ready or /metrics\n", "text/plain")

    def _ready(self) -> None:
        status = self.server.lifecycle.status
        answer: dict[str, object] = {"ready": status.ready, "phase": status.shown_phase}
        if status.memory_low is not None:
            answer["reason"] = status.memory_low
        body = json.dumps(answer).encode() + b"\n"
        self._send(200 if status.ready else 503, body, "application/json")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes every few seconds would drown vLLM's log: stay quiet."""


class ControlServer:
    def __init__(
        self, host: str, port: int, lifecycle: Lifecycle, registry: CollectorRegistry
    ) -> None:
        self._server = _Server((host, port), _Handler)
        self._server.lifecycle = lifecycle
        self._server.registry = registry
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_SECONDS},
            name="control-http",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
