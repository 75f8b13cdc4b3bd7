"""The gateway inside vLLM's API server: no hop, the same request handling.

    GATEWAY_API_KEYS=team-a:sk-a vllm serve MODEL --middleware gateway.embedded.EmbeddedGateway

vLLM's `--middleware` adds this ASGI class around its own app, in its API server
process.  A request to a proxied route (`/v1/chat/completions`, `/v1/completions`,
`/v1/embeddings`, `/v1/responses`, `/tokenize`, `GET /v1/models`) is prepared exactly
as the standalone gateway prepares it (gateway/core/prepare.py: auth, body limit, JSON,
prefix-stable layout, divergence, tenant cache salt, the usage request), waits for an
admission slot and one turn of vLLM's loop (`EmbeddedGateway._turn`), and is then
handed to vLLM's handler as the rewritten body instead of being sent over a socket;
the response comes back through `send` (gateway/embedded/relay.py), where the injected
usage chunk is dropped and the same `gateway_*` metrics are counted.  There is no
second HTTP parse, no upstream write and no relay of every token event: the standalone
gateway's per-request and per-event cost on a small machine (docs/gateway.md,
"Overhead"), which no trim of its Python could bring near a native proxy's.

What differs from the standalone gateway (`python -m gateway`):
- one vLLM only: no replicas, no routing, no `/health` checks of an upstream; the
  `gateway_upstream_*` metrics count vLLM's handler as replica `embedded`;
- the metrics are in vLLM's registry, so vLLM's `/metrics` serves `gateway_*` and
  `vllm:*` together;
- vLLM's other routes: `/health`, `/metrics`, `/ping`, `/version`, `/load` and CORS
  preflights stay open; the paths in `GATEWAY_EMBEDDED_PASSTHROUGH` (default
  `/v1/models,/detokenize`: read-only) are served with a valid key, passed to vLLM as
  they are (no salt, no layout, no admission slot) but for the client's key, which never
  reaches vLLM's handlers; every other path (vLLM's other generation routes such as
  `/v1/messages`, websockets) is a 404 after the key check, as on the standalone
  gateway, since vLLM would run it outside the tenant's salt and limits.
  `/healthz` answers 200 while the process serves, `/readyz` is vLLM's `/health`;
- admission runs on vLLM's loop: a request is admitted when vLLM's API server takes it
  up, which a saturated loop delays (docs/gateway.md);
- settings are `EmbeddedSettings` (gateway/embedded/settings.py): the `GATEWAY_*`
  variables both faces share plus `GATEWAY_EMBEDDED_*`; the standalone gateway's about
  the upstream connection, replicas, host and port are ignored (vLLM's own flags set
  the listener), and no upstream URL is needed.  A bad setting stops vLLM's start with
  one line naming it.

`GATEWAY_EMBEDDED_BYPASS_TOKEN`: a request that carries `x-sparkserve-bypass: <token>`
skips the gateway entirely.  The entrypoint sets a fresh random one at each start for
its own health checks and warm-up (not a tenant's traffic); the overhead benchmark
uses one to measure one vLLM process with and without the gateway in the same
interleaved run.  Unset (the default for `vllm serve` by hand) nothing can bypass it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import sys

import httpx
from prometheus_client import REGISTRY, CollectorRegistry
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core.errors import (
    CLIENT_CLOSED_STATUS,
    SERVER_ERROR_STATUS,
    ConfigError,
    GatewayError,
    NotFound,
    Overloaded,
    rejection_reason,
    send_json_error,
)
from gateway.core.forward import Forward
from gateway.core.headers import headers_error
from gateway.core.metrics import GatewayMetrics
from gateway.core.prepare import Incoming, Preparer
from gateway.core.routes import JSON_ROUTES, RequestCount, refuse, route_table
from gateway.edge.build import admission_of, control_poll_of, preparer_of
from gateway.edge.control_poll import poll_forever
from gateway.edge.vllm_env import MULTIPROC_ENV, several_api_servers
from gateway.embedded.relay import Relay
from gateway.embedded.settings import EmbeddedSettings, load_embedded_settings

log = logging.getLogger("gateway.embedded")

REPLICA = "embedded"
# gateway_upstream_requests_total outcomes here: served, client left, handler raised.
OUTCOMES = ("ok", "cancelled", "protocol")
BYPASS_HEADER = b"x-sparkserve-bypass"
# vLLM's own probes and metrics, answered without a key (as vLLM does).
OPEN_PATHS = frozenset({"/health", "/metrics", "/ping", "/version", "/load"})
_LIVE_BODY = b'{"status":"ok"}'
NOT_SERVED = "not_served"  # gateway_rejected_total: a path not in GATEWAY_EMBEDDED_PASSTHROUGH
# Headers of the client's request that vLLM's handler gets otherwise (or not at all).
_REPLACED_HEADERS = frozenset(
    {b"content-length", b"transfer-encoding", b"content-type", b"authorization"}
)


def check_one_api_server() -> None:
    """`ConfigError` where vLLM serves from several API server processes.

    vLLM sets `PROMETHEUS_MULTIPROC_DIR` before it starts more than one
    (`--api-server-count N`, which data parallelism sets to its size unless told
    otherwise), and its `/metrics` then reads prometheus_client's multiprocess files
    instead of the registry the gateway's metrics are in.  Each process would also
    hold its own admission slots, so the limits would be N times what was set.
    Refused rather than served wrong."""
    if several_api_servers():
        raise ConfigError(
            f"{MULTIPROC_ENV} is set: vLLM serves from several API server processes "
            "(--api-server-count above 1, or data parallelism), and each would count its "
            "own admission limits while vLLM's /metrics would not show the gateway's "
            "histograms; run vLLM with --api-server-count 1, or the standalone gateway "
            "(python -m gateway) in front of it"
        )


def startup_check() -> None:
    """What vLLM's API server will do with the `GATEWAY_*` settings at start, done
    first (the entrypoint's pre-flight): settings, keys, the salt secret (created in
    the state directory when none is given, as the server would), one API server
    process; `ConfigError` with the one-line reason."""
    check_one_api_server()
    preparer_of(
        load_embedded_settings(),
        GatewayMetrics.create(CollectorRegistry()),
        affinity_needed=False,
        headers_needed=False,
    )


class EmbeddedGateway:
    """ASGI middleware for vLLM's `--middleware` (module docstring).

    vLLM builds it as `EmbeddedGateway(app)`, reading the settings from the
    environment and registering the metrics in prometheus_client's default registry
    (vLLM's `/metrics`); tests pass `settings` and a `registry` of their own."""

    def __init__(
        self,
        app: ASGIApp,
        settings: EmbeddedSettings | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.app = app
        _log_to_stderr()
        try:
            check_one_api_server()
            self.settings = settings if settings is not None else load_embedded_settings()
            self.metrics = GatewayMetrics.create(REGISTRY if registry is None else registry)
            self.preparer: Preparer = preparer_of(
                self.settings, self.metrics, affinity_needed=False, headers_needed=False
            )
        except ConfigError as exc:
            # vLLM builds its middleware at start: one line, then the start fails.
            print(f"gateway (embedded): {exc.message}", file=sys.stderr)
            raise SystemExit(2) from None
        self.admission = admission_of(self.settings)
        self.metrics.concurrency_limit.set(self.settings.max_concurrency)
        self.metrics.upstream_healthy.labels(REPLICA).set(1)
        # vLLM's handler as the one replica: its children made once (several per request).
        self._replica_in_flight = self.metrics.upstream_in_flight.labels(REPLICA)
        self._outcomes = {
            outcome: self.metrics.upstream_requests.labels(REPLICA, outcome) for outcome in OUTCOMES
        }
        self.routes = route_table(JSON_ROUTES)
        self.passthrough = frozenset(self.settings.embedded_passthrough)
        self.passthrough_all = "*" in self.passthrough
        secret = self.settings.embedded_bypass_token
        self.bypass: bytes | None = secret.get_secret_value().encode() if secret else None
        if self.bypass:
            log.info(
                "GATEWAY_EMBEDDED_BYPASS_TOKEN is set: requests with %s and that token skip "
                "the gateway (the entrypoint's health checks and warm-up; benchmarks)",
                BYPASS_HEADER.decode(),
            )
        self.control_poll = control_poll_of(self.settings, self.admission, self.metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if self.bypass is not None and self._bypassed(scope):
                await self.app(scope, receive, send)
                return
            route = self.routes.get((scope["method"], scope["path"]))
            if route is not None:
                await self._serve(route, scope, receive, send)
            else:
                await self._other(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _bypassed(self, scope: Scope) -> bool:
        assert self.bypass is not None
        for name, value in scope["headers"]:
            if name == BYPASS_HEADER:
                return hmac.compare_digest(value, self.bypass)
        return False

    # ---- the proxied routes ----

    async def _serve(self, route: str, scope: Scope, receive: Receive, send: Send) -> None:
        metrics = self.metrics
        count = RequestCount(metrics, route)
        try:
            forward = await self.preparer.prepare(route, scope, receive)
        except ClientDisconnect:  # the client left while sending its body
            count(CLIENT_CLOSED_STATUS)
            return
        except GatewayError as error:
            await refuse(send, count, error)
            return
        except Exception:
            log.exception("unexpected error preparing %s", route)
            count(SERVER_ERROR_STATUS)
            await send_json_error(send, GatewayError("Internal gateway error."))
            return
        try:
            await self._admit_and_hand_over(forward, count, scope, receive, send)
        finally:
            forward.done()  # the gateway is through with it: answered, refused or left

    async def _admit_and_hand_over(
        self, forward: Forward, count: RequestCount, scope: Scope, receive: Receive, send: Send
    ) -> None:
        metrics, key = self.metrics, forward.principal.key_id
        try:
            waited = await self.admission.acquire(key)
        except Overloaded as error:
            await refuse(send, count, error)
            return
        metrics.queue_wait.observe(waited)
        metrics.in_flight.inc()
        self._replica_in_flight.inc()
        outcome = "cancelled"
        relay = Relay(metrics, forward, count, send)
        try:
            await self._turn()
            await self.app(*_handed_over(scope, receive, forward, relay), relay)
            # vLLM may end a stream whose client left as if it were done: no `ok`.
            outcome = "ok" if relay.complete and not relay.left_early else "cancelled"
        except Exception:
            if not relay.left_early:  # else: raised because the client left
                count(SERVER_ERROR_STATUS)  # vLLM's ServerErrorMiddleware answers 500
                outcome = "protocol"
            raise
        finally:
            metrics.in_flight.dec()
            self._replica_in_flight.dec()
            self._outcomes[outcome].inc()
            self.admission.release(key)
            count(CLIENT_CLOSED_STATUS)  # no response started: the client left first

    async def _turn(self) -> None:
        """Let vLLM's loop take one turn between preparing a request and handing it over.

        The requests of a burst that reached vLLM's server in the same turn of its loop
        are then all prepared first, one after another, and handed to vLLM's handler
        after that, in the same order.  Without the turn each preparation would run
        between two runs of vLLM's handler (its template, tokenizer, engine call), which
        leave little of the gateway's code and data in the CPU's caches: timed on vLLM's
        loop under load, the same preparation took about twice what it takes in a hot
        loop (docs/gateway.md, "Embedded in vLLM").  A request alone waits one
        turn (µs) more."""
        await asyncio.sleep(0)

    # ---- everything else ----

    async def _other(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if path == "/healthz":
            await _answer(send, 200, _LIVE_BODY)
            return
        if path == "/readyz":
            await self.app({**scope, "path": "/health", "raw_path": b"/health"}, receive, send)
            return
        if not _open(scope):
            error: GatewayError | None = headers_error(scope)
            if error is None:
                try:
                    self.preparer.principal(Incoming(scope, receive))
                except GatewayError as refused:
                    error = refused
            if error is not None:
                reason = rejection_reason(error)
                if reason is not None:
                    self.metrics.rejected.labels(reason).inc()
                await send_json_error(send, error)
                return
            if not self._passes(path):
                self.metrics.rejected.labels(NOT_SERVED).inc()
                await send_json_error(send, self._not_served(scope["method"], path))
                return
            scope = _without_key(scope)
        await self.app(scope, receive, send)

    def _passes(self, path: str) -> bool:
        return self.passthrough_all or path in self.passthrough

    @staticmethod
    def _not_served(method: str, path: str) -> NotFound:
        return NotFound(
            f"{method} {path} is not served through the sparkserve gateway: vLLM would run "
            "it without the tenant's cache salt and admission slot. Add the path to "
            "GATEWAY_EMBEDDED_PASSTHROUGH to let keyed clients reach it anyway."
        )

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """vLLM's websocket routes (realtime) need a key like any other guarded path, and
        a path in GATEWAY_EMBEDDED_PASSTHROUGH (they generate unsalted, unadmitted)."""
        try:
            self.preparer.principal(Incoming({**scope, "method": "GET"}, receive))
        except GatewayError:
            self.metrics.rejected.labels("unauthorized").inc()
            await send({"type": "websocket.close", "code": 1008})
            return
        if not self._passes(scope["path"]):
            self.metrics.rejected.labels(NOT_SERVED).inc()
            reason = "not served through the gateway: GATEWAY_EMBEDDED_PASSTHROUGH"
            await send({"type": "websocket.close", "code": 1008, "reason": reason})
            return
        await self.app(_without_key(scope), receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """vLLM's lifespan runs as long as the server: the control poll (thermal guard,
        memory gate) runs beside it."""
        poll: asyncio.Task[None] | None = None
        client: httpx.AsyncClient | None = None
        if self.settings.control_url:
            client = httpx.AsyncClient(timeout=self.settings.connect_timeout_seconds)
            url = self.settings.control_url + "/metrics"
            poll = asyncio.get_running_loop().create_task(
                poll_forever(self.control_poll, client, url, self.settings.thermal_poll_seconds)
            )
        try:
            await self.app(scope, receive, send)
        finally:
            if poll is not None:
                poll.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poll
            if client is not None:
                await client.aclose()


def _log_to_stderr() -> None:
    """vLLM configures its own loggers only: give this module's a handler, once, so
    its warnings and errors reach vLLM's output instead of being dropped."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("gateway (embedded) %(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def _open(scope: Scope) -> bool:
    path: str = scope["path"]
    return (
        scope["method"] == "OPTIONS"
        or path in OPEN_PATHS
        or path.startswith("/metrics/")  # vLLM mounts its exposition under /metrics
    )


def _handed_over(
    scope: Scope, receive: Receive, forward: Forward, relay: Relay
) -> tuple[Scope, Receive]:
    """The scope and `receive` vLLM's handler gets: the prepared body in one message
    (with its length in the headers), then the client's own messages, a disconnect
    noted on `relay`.  The client's key stays with the gateway, as the standalone one
    never forwards it."""
    body = forward.body
    given = body is None

    async def handed_receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        message = await receive()
        if message["type"] == "http.disconnect":
            relay.client_left()
        return message

    if body is None:
        return _without_key(scope), handed_receive
    headers = [(name, value) for name, value in scope["headers"] if name not in _REPLACED_HEADERS]
    headers += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    return {**scope, "headers": headers}, handed_receive


def _without_key(scope: Scope) -> Scope:
    headers = [(name, value) for name, value in scope["headers"] if name != b"authorization"]
    return {**scope, "headers": headers}


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
