"""What a client saw on one SSE stream, judged event by event.

`StreamTally.feed` takes the raw bytes as they arrive; each complete event must be
`data: [DONE]` or `data: <JSON object>`; anything else is counted as malformed.
Tokens are counted from `choices[].token_ids` (vLLM's `return_token_ids`), so a
duplicated or dropped token shows against `usage.completion_tokens`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_DONE = "[DONE]"


@dataclass
class StreamTally:
    events: int = 0
    malformed: int = 0
    done: bool = False
    tokens: int = 0
    text_chunks: int = 0
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: dict[str, Any] | None = None
    after_done: int = 0
    token_times: list[float] = field(default_factory=list)
    _pending: str = ""

    def feed(self, chunk: bytes, now: float) -> None:
        data = self._pending + chunk.decode("utf-8", errors="replace").replace("\r\n", "\n")
        *complete, self._pending = data.split("\n\n")
        for event in complete:
            if event.strip():
                self._event(event, now)

    @property
    def truncated_event(self) -> bool:
        """Bytes left over that never formed a complete event."""
        return bool(self._pending.strip())

    def _event(self, event: str, now: float) -> None:
        self.events += 1
        if self.done:
            self.after_done += 1
        data_lines = [line[5:].strip() for line in event.split("\n") if line.startswith("data:")]
        if len(data_lines) != 1:
            self.malformed += 1
            return
        if data_lines[0] == _DONE:
            self.done = True
            return
        try:
            payload = json.loads(data_lines[0])
        except ValueError:
            self.malformed += 1
            return
        if not isinstance(payload, dict):
            self.malformed += 1
            return
        self._payload(payload, now)

    def _payload(self, payload: dict[str, Any], now: float) -> None:
        if isinstance(payload.get("error"), dict):
            self.error = payload["error"]
            return
        if isinstance(payload.get("usage"), dict):
            self.usage = payload["usage"]
        for choice in payload.get("choices") or []:
            ids = choice.get("token_ids")
            if isinstance(ids, list) and ids:
                self.tokens += len(ids)
                self.token_times.append(now)
            if choice.get("text") or (choice.get("delta") or {}).get("content"):
                self.text_chunks += 1
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]


def is_openai_error(body: object) -> bool:
    """`{"error": {"message": str, "type": str, …}}` with a non-empty message."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return False
    error = body["error"]
    return isinstance(error.get("message"), str) and bool(error["message"]) and "type" in error


def parse_json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return None
