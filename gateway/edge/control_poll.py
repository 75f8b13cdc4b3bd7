"""The poll of the entrypoint's control `/metrics` (GATEWAY_CONTROL_URL), for both
faces: one read every GATEWAY_THERMAL_POLL_SECONDS, applied to the `ControlPoll`
(gateway/core/control.py).  An unreachable control endpoint leaves it as it is.
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


async def poll_forever(poll: Applies, client: httpx.AsyncClient, url: str, period_s: float) -> None:
    while True:
        try:
            response = await client.get(url)
            response.raise_for_status()
            poll.apply(response.text)
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("control poll of %s failed: %s", url, exc)
        await asyncio.sleep(period_s)
