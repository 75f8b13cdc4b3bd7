"""`gateway.app:create_app`: the standalone gateway's app (gateway/standalone/app.py),
kept at this name for `uvicorn gateway.app:create_app --factory`."""

from gateway.standalone.app import create_app

__all__ = ["create_app"]
