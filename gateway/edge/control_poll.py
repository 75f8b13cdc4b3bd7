"""The poll of the entrypoint's control `/metrics` (GATEWAY_CONTROL_URL), for both
faces: one read every GATEWAY_THERMAL_POLL_SECONDS, applied to the `ControlPoll`
(gateway/core/control.py).  An unreachable control endpoint leaves it as it is.

Each read may take at most `poll_timeout(period)`: twice the period, at least a second.
A control endpoint that accepts and then stalls (its container at its memory limit, say)
would otherwise hold the poll for the client's whole read timeout, and the memory gate
and thermal guard would go on with a reading that old.  The first failure after a good
reading is a warning, the first good reading after failures a note.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import httpx

log = logging.getLogger("gateway.control")


class Applies(Protocol):
    """What a reading of the control `/metrics` is applied to (`ControlPoll`)."""

    def apply(self, metrics_text: str) -> None: ...


def poll_timeout(period_s: float) -> float:
    return max(1.0, 2 * period_s)


async def poll_forever(poll: Applies, client: httpx.AsyncClient, url: str, period_s: float) -> None:
    failing = False
    timeout = poll_timeout(period_s)
    while True:
        try:
            response = await client.get(url, timeout=timeout)
            response.raise_for_status()
            poll.apply(response.text)
        except (httpx.HTTPError, ValueError) as exc:
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if not failing:
                log.warning(
                    "control poll of %s failed (%s); retrying every %g s", url, why, period_s
                )
            failing = True
        else:
            if failing:
                log.info("control poll of %s answers again", url)
            failing = False
        await asyncio.sleep(period_s)
