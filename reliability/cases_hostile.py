"""Hostile input and access: bad requests, bad credentials, tenant cache isolation, logs."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from pathlib import Path

import httpx

from reliability.client import bearer, chat_body, send
from reliability.context import Ctx
from reliability.events import is_openai_error, parse_json
from reliability.hostile_inputs import Hostile, chunks, must_4xx, no_5xx
from reliability.report import CaseResult, verdict
from reliability.stack import ROOT

GROUP = "hostile"
TRACEBACK = "Traceback (most recent call last)"


async def _send_hostile(ctx: Ctx, item: Hostile) -> tuple[int | None, bytes]:
    headers = {"content-type": "application/json", **ctx.alice, **item.headers}
    content = chunks(item.content) if item.chunked and item.content else item.content
    try:
        reply = await send(
            ctx.client,
            item.method,
            ctx.url(item.path),
            headers=headers,
            content=content,
            timeout_s=60,
        )
    except httpx.HTTPError as exc:
        return None, type(exc).__name__.encode()
    return reply.status, reply.body


def _log_sizes(ctx: Ctx) -> dict[str, int]:
    return {name: len(text) for name, text in ctx.stack.logs().items()}


def _new_tracebacks(ctx: Ctx, sizes: dict[str, int]) -> list[str]:
    logs = ctx.stack.logs()
    return [name for name, text in logs.items() if TRACEBACK in text[sizes.get(name, 0) :]]


async def _healthy(ctx: Ctx) -> bool:
    health = await ctx.client.get(ctx.url("/healthz"))
    reply = await send(
        ctx.client,
        "POST",
        ctx.url("/v1/chat/completions"),
        headers=ctx.alice,
        json_body=chat_body("still there?"),
    )
    return health.status_code == 200 and reply.status == 200


async def hostile_input(ctx: Ctx) -> CaseResult:
    """Malformed, huge, invalid and absurd requests: 4xx + OpenAI body, no traceback, healthy."""
    sizes = _log_sizes(ctx)
    canary = ctx.stack.creds.canary
    bad: list[str] = []
    statuses: dict[str, int | None] = {}
    for item in must_4xx(canary):
        status, body = await _send_hostile(ctx, item)
        statuses[item.name] = status
        if status is None or not 400 <= status < 500 or not is_openai_error(parse_json(body)):
            bad.append(f"{item.name} → {status} {body[:100]!r}")
    for item in no_5xx(canary):
        status, body = await _send_hostile(ctx, item)
        statuses[item.name] = status
        shaped = status == 200 or is_openai_error(parse_json(body))
        if status is None or status >= 500 or not shaped:
            bad.append(f"{item.name} → {status} {body[:100]!r}")
    healthy = await _healthy(ctx)
    tracebacks = _new_tracebacks(ctx, sizes)
    total = len(statuses)
    accepted = sorted(name for name, status in statuses.items() if status == 200)
    figure = (
        f"{total - len(bad)}/{total} answered as required; accepted (200): "
        f"{', '.join(accepted) or 'none'}; healthy after: {'yes' if healthy else 'NO'}; "
        f"tracebacks in {', '.join(tracebacks) or 'no log'}"
    )
    ok = not bad and healthy and not tracebacks
    return CaseResult(
        GROUP, "hostile-input", figure, verdict(ok), "; ".join(bad), data={"statuses": statuses}
    )


def _bad_credentials(key: str) -> dict[str, dict[str, str]]:
    return {
        "no key": {},
        "wrong key": bearer("sk-not-a-key"),
        "key minus last char": bearer(key[:-1]),
        "key plus a char": bearer(key + "x"),
        "Basic scheme": {"Authorization": f"Basic {key}"},
        "empty bearer": {"Authorization": "Bearer"},
        "key without scheme": {"Authorization": key},
    }


def compare_digest_sites(package: Path) -> list[str]:
    """`file:line` of every hmac.compare_digest call in a package's source (its
    subpackages included)."""
    sites = []
    for path in sorted(package.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bhmac\.compare_digest\(", line):
                sites.append(f"{path.relative_to(package.parent)}:{number}")
    return sites


async def auth(ctx: Ctx) -> CaseResult:
    """Bad keys and schemes: 401; another tenant's key acts as that tenant; constant time."""
    creds, problems = ctx.stack.creds, []
    for name, headers in _bad_credentials(creds.alice_key).items():
        reply = await send(
            ctx.client,
            "POST",
            ctx.url("/v1/chat/completions"),
            headers=headers,
            json_body=chat_body("who am I"),
        )
        if reply.status != 401 or not is_openai_error(parse_json(reply.body)):
            problems.append(f"{name} → {reply.status}")
    models = await send(ctx.client, "GET", ctx.url("/v1/models"))
    if models.status != 401:
        problems.append(f"/v1/models without key → {models.status}")
    bob = await send(
        ctx.client,
        "POST",
        ctx.url("/v1/chat/completions"),
        headers=ctx.bob,
        json_body=chat_body("bob here"),
    )
    metrics = (await ctx.client.get(ctx.url("/metrics"))).text
    bob_counted = re.search(r'gateway_prompt_tokens_total\{tenant="bob"\} [1-9]', metrics)
    if bob.status != 200 or not bob_counted:
        problems.append(f"bob's key → {bob.status}, counted as bob: {bool(bob_counted)}")
    if any(key in metrics for key in creds.keys()):
        problems.append("a key appears in /metrics")
    sites = compare_digest_sites(ROOT / "gateway")
    if not sites:
        problems.append("no hmac.compare_digest in gateway/")
    figure = (
        f"{len(_bad_credentials(''))} bad credentials + keyless /v1/models → 401; bob's key "
        f"→ tenant bob; keys absent from /metrics; hmac.compare_digest at {', '.join(sites)}"
    )
    return CaseResult(GROUP, "auth", figure, verdict(not problems), "; ".join(problems))


def _filler(ctx: Ctx) -> str:
    words = "the budget planner sizes the cache so every request fits in memory".split()
    nonce = f"{ctx.stack.creds.canary} {time.monotonic_ns()}"
    return nonce + " " + " ".join(ctx.rng.choice(words) for _ in range(700))


async def _cached(ctx: Ctx, headers: dict[str, str], text: str, salt: str | None) -> int | None:
    extra: dict[str, object] = {} if salt is None else {"cache_salt": salt}
    reply = await send(
        ctx.client,
        "POST",
        ctx.url("/v1/chat/completions"),
        headers=headers,
        json_body={**chat_body(text), **extra},
    )
    payload = parse_json(reply.body)
    if reply.status != 200 or not isinstance(payload, dict):
        return None
    details = (payload.get("usage") or {}).get("prompt_tokens_details") or {}
    value = details.get("cached_tokens")
    return value if isinstance(value, int) else None


async def tenant_cache(ctx: Ctx) -> CaseResult:
    """Alice's cached prefix never serves Bob, with or without Bob's own cache_salt."""
    text, salt = _filler(ctx), ctx.stack.creds.client_salt
    seen = {
        "alice first": await _cached(ctx, ctx.alice, text, None),
        "alice repeat": await _cached(ctx, ctx.alice, text, None),
        "alice+salt first": await _cached(ctx, ctx.alice, text, salt),
        "alice+salt repeat": await _cached(ctx, ctx.alice, text, salt),
        "bob same prompt": await _cached(ctx, ctx.bob, text, None),
        "bob with alice's salt": await _cached(ctx, ctx.bob, text, salt),
        "bob own salt": await _cached(ctx, ctx.bob, text, "bob-own-salt"),
    }
    figure = "cached tokens: " + ", ".join(f"{k} {v}" for k, v in seen.items())
    controls = (seen["alice repeat"] or 0) > 0 and (seen["alice+salt repeat"] or 0) > 0
    leaks = [k for k in seen if k.startswith("bob") and seen[k] != 0]
    problems = [] if controls else ["positive control: alice's repeat got no cache hit"]
    problems += [f"{k}: {seen[k]} cached" for k in leaks]
    return CaseResult(
        GROUP, "tenant-cache-isolation", figure, verdict(not problems), "; ".join(problems)
    )


def derived_salts(secret: str, tenants: list[str], client_salt: str) -> list[str]:
    """The cache salts the gateway sends vLLM (gateway docs: HMAC-SHA256 of the scope)."""

    def mac(message: str) -> str:
        return hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()

    scopes = [f"tenant:{t}" for t in tenants]
    return [mac(s) for s in scopes] + [mac(s + "\0client:" + client_salt) for s in scopes]


def secret_hits(logs: dict[str, str], needles: dict[str, str]) -> dict[str, list[str]]:
    """For each log, the labels of the needles found in it."""
    return {
        name: [label for label, needle in needles.items() if needle in text]
        for name, text in logs.items()
    }


def log_scan(ctx: Ctx) -> CaseResult:
    """API keys, salts, the salt secret and prompt text never reach any log of the run."""
    creds = ctx.stack.creds
    needles = {
        "alice key": creds.alice_key,
        "bob key": creds.bob_key,
        "edge key": creds.edge_key,
        "salt secret": creds.salt_secret,
        "client salt": creds.client_salt,
        "prompt text": creds.canary,
    }
    for i, salt in enumerate(derived_salts(creds.salt_secret, ["alice", "bob"], creds.client_salt)):
        needles[f"derived salt {i}"] = salt
    logs = ctx.stack.logs()
    hits = {name: found for name, found in secret_hits(logs, needles).items() if found}
    size = sum(len(text) for text in logs.values())
    figure = (
        f"{len(needles)} secrets/prompt canaries in {len(logs)} logs "
        f"({size / 1024:.0f} KiB): "
        + ("; ".join(f"{n}: {', '.join(h)}" for n, h in hits.items()) if hits else "0 hits")
    )
    return CaseResult(GROUP, "secrets-in-logs", figure, verdict(not hits))
