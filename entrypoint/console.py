"""The entrypoint's own output: `[sparkserve]` lines; vLLM's under `[vllm]`, Ray's under `[ray]`.

One lock keeps the main thread's and the forwarding thread's lines whole.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

OWN_PREFIX = "[sparkserve] "
VLLM_PREFIX = "[vllm] "
RAY_PREFIX = "[ray] "


class Console:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._lock = threading.Lock()

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            stream.write(text + "\n")
            stream.flush()

    def say(self, message: str) -> None:
        for line in message.splitlines() or [""]:
            self._write(self._out, OWN_PREFIX + line)

    def phase(self, message: str) -> None:
        self.say(f"phase: {message}")

    def vllm(self, line: str) -> None:
        self._write(self._out, VLLM_PREFIX + line)

    def ray(self, line: str) -> None:
        self._write(self._out, RAY_PREFIX + line)

    def error(self, message: str) -> None:
        """The one line a failure is reported with (stderr)."""
        self._write(self._err, f"sparkserve: error: {message}")

    def raw(self, text: str) -> None:
        """Output meant to be read whole (--dry-run): no prefix."""
        self._write(self._out, text)
