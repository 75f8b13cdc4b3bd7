"""`python -m gateway` (gateway/__main__.py): serve the standalone gateway with uvicorn
(uvloop/httptools when present).

`--help` lists every GATEWAY_* setting; settings come only from the environment.
Bad configuration prints one line on stderr and exits 2, never a traceback.
SIGTERM or SIGINT shut it down gracefully (in-flight streams finish or are cut at
uvicorn's shutdown) and it exits 0: uvicorn on its own re-raises the signal after a
graceful shutdown, so `docker stop` would show exit code 143 for a clean stop.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from gateway.core.errors import ConfigError
from gateway.standalone import heap
from gateway.standalone.app import create_app
from gateway.standalone.settings import load_settings
from gateway.standalone.usage import usage
from gateway.standalone.workers import serve as serve_workers

EXIT_BAD_CONFIG = 2


def _fastest(module: str, preferred: str, fallback: str) -> str:
    return preferred if importlib.util.find_spec(module) is not None else fallback


class GracefulServer(uvicorn.Server):
    """uvicorn's server with its signal handling, minus re-raising the signal at exit."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        signals = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in signals}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args in (["--help"], ["-h"]):
        print(usage())
        return 0
    if args:
        print(
            f"gateway: unknown arguments {' '.join(args)!r}; settings are GATEWAY_* "
            "environment variables (python -m gateway --help lists them)",
            file=sys.stderr,
        )
        return EXIT_BAD_CONFIG
    try:
        settings = load_settings()
        app = create_app(settings)
    except ConfigError as exc:
        print(f"gateway: {exc.message}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    # With workers, the app built above only proved the settings usable: each worker
    # builds its own.
    options: dict[str, Any] = dict(
        host=settings.host,
        port=settings.port,
        loop=_fastest("uvloop", "uvloop", "asyncio"),
        http=_fastest("httptools", "httptools", "h11"),
        log_level=settings.log_level,
        access_log=settings.access_log == "on",
        # The client address from X-Forwarded-For is only used by the access log;
        # without it, uvicorn's proxy-headers middleware would run on every request.
        proxy_headers=settings.access_log == "on",
        lifespan="on",
        ws="none",
        # Longer than clients keep idle connections (httpx 5 s, aiohttp 15 s), as nginx
        # (75 s): the client closes an idle connection, not the gateway while a request
        # is on its way on it (uvicorn's 5 s equals httpx's: a reset now and then).
        timeout_keep_alive=settings.keepalive_seconds,
    )
    if settings.workers > 1:
        try:
            serve_workers(settings, options)
        except ConfigError as exc:
            print(f"gateway: {exc.message}", file=sys.stderr)
            return EXIT_BAD_CONFIG
        return 0
    heap.settle()
    GracefulServer(uvicorn.Config(app, **options)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
