"""Signals become a flag the supervisor polls (handlers only record; nothing runs in them).

SIGTERM/SIGINT are a requested stop (exit 0); SIGHUP/SIGQUIT stop vLLM the same
way and exit 128+N, as if the signal had killed the entrypoint (docs/entrypoint.md).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
FATAL_SIGNALS = (signal.SIGHUP, signal.SIGQUIT)
SIGNAL_EXIT_BASE = 128


class StopRequested(Exception):
    """A handled signal arrived: stop vLLM and exit with `exit_code`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 0 if self.signum in STOP_SIGNALS else SIGNAL_EXIT_BASE + self.signum


class SignalFlag:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._signum: int | None = None

    def install(self) -> None:
        for sig in (*STOP_SIGNALS, *FATAL_SIGNALS):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.request(signum)

    def request(self, signum: int) -> None:
        """Record `signum` as if it had arrived (the first one wins) and wake any wait()."""
        if self._signum is None:
            self._signum = signum
        self._event.set()

    def check(self) -> None:
        """Raise StopRequested once a handled signal arrived."""
        if self._signum is not None:
            raise StopRequested(self._signum)

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking at once on a signal; then check()."""
        self._event.wait(seconds)
        self.check()
