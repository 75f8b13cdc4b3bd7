"""What the gateway's OpenAPI document says about the proxied routes.

The gateway accepts any JSON object (vLLM validates the fields); the chat
schema describes the parts the gateway itself reads and rewrites (messages,
tools, stream options, cache salt), so schema-driven fuzzing reaches them.
Every error the gateway raises has the OpenAI shape.
"""

from __future__ import annotations

from typing import Any

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "code": {"type": "string"},
            },
        }
    },
}
# Statuses the gateway itself may answer on a proxied route (vLLM's own pass through).
ERROR_STATUSES = {
    "400": "malformed JSON or a bad cache_salt",
    "401": "missing or invalid API key",
    "404": "model not served here or not for the key (model_not_found)",
    "413": "body over GATEWAY_MAX_BODY_BYTES",
    "431": "too many or too large request headers",
    "429": "admission queue full or wait timed out (Retry-After)",
    "502": "vLLM broke the connection",
    "503": "vLLM unreachable (Retry-After)",
    "504": "vLLM silent past GATEWAY_READ_TIMEOUT_SECONDS",
}
_CONTENT_PART = {
    "type": "object",
    "properties": {"type": {"type": "string"}, "text": {"type": "string"}},
}
_MESSAGE = {
    "type": "object",
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": _CONTENT_PART},
                {"type": "null"},
            ]
        },
    },
    "required": ["role"],
}
_TOOL = {
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "function": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "parameters": {"type": "object"}},
        },
    },
}
CHAT_SCHEMA = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": _MESSAGE},
        "tools": {"type": "array", "items": _TOOL},
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object"},
        "cache_salt": {"type": "string"},
    },
    "required": ["model", "messages"],
}


def _errors() -> dict[str, Any]:
    content = {"application/json": {"schema": _ERROR}}
    return {
        status: {"description": why, "content": content} for status, why in ERROR_STATUSES.items()
    }


def json_route(path: str) -> dict[str, Any]:
    """`openapi_extra` for a proxied POST route."""
    schema = CHAT_SCHEMA if path == "/v1/chat/completions" else {"type": "object"}
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        "responses": _errors(),
    }


def plain_route() -> dict[str, Any]:
    """`openapi_extra` for a proxied GET route."""
    return {"responses": _errors()}
