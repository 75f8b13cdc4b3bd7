"""SIGTERM ends a run like Ctrl-C, so its `finally` blocks stop what it started.

`timeout`, CI runners, `docker stop` and `kill` send SIGTERM, which by default ends
Python at once: no `finally` runs, and the servers a run started (vLLM in a process
group of its own, gateways, Prometheus) keep running, holding the CPU, memory and
ports the next run needs.  `interrupt_on_sigterm()` makes the first SIGTERM raise
KeyboardInterrupt instead; a second one during the clean-up ends the process the
default way.

`tolerate_closed_output()` keeps the clean-up going when the run's output is gone:
Ctrl-C on `make demo | tee demo.log` ends `tee` too, and the next line printed would
raise BrokenPipeError in the middle of the stop and skip the rest of it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TextIO, cast


def _interrupt(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM is not delayed
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def interrupt_on_sigterm() -> bool:
    """Install the handler (only the main thread can), and make the process's output
    survive a closed pipe; True when the handler is installed."""
    tolerate_closed_output()
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(signal.SIGTERM, _interrupt)
    return True


class _ClosedOutputTolerant:
    """A text stream whose writes to a closed pipe are dropped instead of raising: the
    first BrokenPipeError points the descriptor at /dev/null (what Python's docs advise
    for SIGPIPE), so later writes, and the interpreter's last flush, succeed too."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _gone(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()
            try:
                self._stream.flush()  # now into /dev/null
            except OSError:
                pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def tolerate_closed_output() -> None:
    """Wrap sys.stdout and sys.stderr (once) so a closed pipe never raises."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _ClosedOutputTolerant):
            setattr(sys, name, cast(TextIO, _ClosedOutputTolerant(stream)))


def stop_every(steps: list[tuple[str, Callable[[], object]]]) -> list[str]:
    """Run every stop step, in order, even when some raise; one line per failed step."""
    failed = []
    for name, step in steps:
        try:
            step()
        except Exception as exc:  # the next step must run regardless
            failed.append(f"stopping {name}: {type(exc).__name__}: {exc}")
    return failed


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
