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
import threading
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
