"""`python -m gateway`: serve the gateway with uvicorn (uvloop/httptools when present).

Bad configuration prints one line on stderr and exits 2, never a traceback.
"""

from __future__ import annotations

import importlib.util
import sys

import uvicorn

from gateway.app import create_app
from gateway.errors import ConfigError
from gateway.settings import load_settings

EXIT_BAD_CONFIG = 2


def _fastest(module: str, preferred: str, fallback: str) -> str:
    return preferred if importlib.util.find_spec(module) is not None else fallback


def main() -> int:
    try:
        settings = load_settings()
        app = create_app(settings)
    except ConfigError as exc:
        print(f"gateway: {exc.message}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        loop=_fastest("uvloop", "uvloop", "asyncio"),
        http=_fastest("httptools", "httptools", "h11"),
        log_level=settings.log_level,
        access_log=settings.access_log == "on",
        lifespan="on",
        ws="none",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
