"""SIGTERM ends a run like Ctrl-C, so its `finally` blocks stop what it started.

`timeout`, CI runners, `docker stop` and `kill` send SIGTERM, which by default ends
Python at once: no `finally` runs, and the servers a run started (vLLM in a process
group of its own, gateways, Prometheus) keep running, holding the CPU, memory and
ports the next run needs.  `interrupt_on_sigterm()` makes the first SIGTERM raise
KeyboardInterrupt instead; a second one during the clean-up ends the process the
default way.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType


def _interrupt(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM is not delayed
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def interrupt_on_sigterm() -> bool:
    """Install the handler (only the main thread can); True when installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(signal.SIGTERM, _interrupt)
    return True


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C


def run_interruptible(name: str, body: Callable[[], int]) -> int:
    """`body()`, with SIGTERM turned into KeyboardInterrupt; either one ends it with a
    line on stderr and exit 130 after `body`'s clean-up ran, instead of a traceback."""
    interrupt_on_sigterm()
    try:
        return body()
    except KeyboardInterrupt as stop:
        print(
            f"{name}: interrupted ({str(stop) or 'Ctrl-C'}); what it started is stopped",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
