"""Traffic that makes every dashboard panel move: through the gateway, and to the MTP vLLM.

Each function exercises a path a panel shows: streamed chats with a prompt long
enough for prefix-cache hits (vLLM's CPU block is 128 tokens) and a timestamp the
layout moves, a chat session whose system prompt changes (prefix divergence), a burst
over the per-key limit (queue wait, 429), a bad key (401) and an unreachable
upstream (5xx, upstream error).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from gateway.standalone.app import create_app
from gateway.standalone.settings import load_settings

SYSTEM_WORDS = (
    "You are a careful assistant for the sparkserve project. Answer with short, exact "
    "statements about the memory budget, the KV cache, the prefix cache and the gateway. "
)
LONG_SYSTEM = SYSTEM_WORDS * 12 + "Current time: 2026-11-29T09:30:56Z."
CHANGED_SYSTEM = "You changed: " + LONG_SYSTEM
TIMEOUT_S = 120.0
KEYS = ("key-alice", "key-bob")  # tenants alice and bob of `gateway_app`
# Per-key limit 1 + queue 1, the rest refused with 429.  The streams start together,
# but they need not reach the gateway together: through Docker's published port on a
# busy 2-core host, requests sent at once have reached it up to 4 s apart (longer than
# a whole stream), and six of them were once all served one after another.  Sixteen
# leave several 429s even when they arrive spread over a few streams' time.
BURST = 16
BURST_TOKENS = 1536  # the first still runs when the last arrives, on a busy host (< 2,048)
# A counter child is born with its first request; later requests must land in later
# scrapes (1 s apart) for rate() to see them.
SCRAPE_GAP_S = 1.5


def chat(
    client: httpx.Client,
    key: str,
    messages: list[dict[str, str]],
    *,
    stream: bool = True,
    session: str | None = None,
    max_tokens: int = 8,
    model: str = "tiny",
) -> int:
    """POST a chat completion; read the whole (streamed) body; return the status."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": stream,
        "ignore_eos": True,
    }
    headers = {"authorization": f"Bearer {key}"}
    if session:
        headers["x-session-id"] = session
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        response.read()
        return response.status_code


def session_turns(client: httpx.Client, key: str, turns: int = 3, model: str = "tiny") -> list[int]:
    """A growing conversation behind one long system prompt, then a changed system prompt."""
    messages = [{"role": "system", "content": LONG_SYSTEM}]
    statuses = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}: how big is the cache?"})
        statuses.append(chat(client, key, messages, session="s1", model=model))
        messages.append({"role": "assistant", "content": f"answer {turn}"})
        time.sleep(SCRAPE_GAP_S)
    messages[0] = {"role": "system", "content": CHANGED_SYSTEM}
    statuses.append(chat(client, key, messages, session="s1", model=model))
    return statuses


def burst(base_url: str, key: str, model: str = "tiny") -> list[int]:
    """BURST streams for one key at once: one runs, one waits, the rest are refused (429)."""
    user = [{"role": "user", "content": "write a long answer"}]
    start = threading.Barrier(BURST)

    def one(_: int) -> int:
        with httpx.Client(base_url=base_url, timeout=TIMEOUT_S) as client:
            start.wait()
            return chat(client, key, user, max_tokens=BURST_TOKENS, model=model)

    with ThreadPoolExecutor(BURST) as pool:
        return sorted(pool.map(one, range(BURST)))


def completion(client: httpx.Client, key: str, model: str = "tiny", max_tokens: int = 8) -> int:
    body = {"model": model, "prompt": "the cache", "max_tokens": max_tokens, "ignore_eos": True}
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return client.post("/v1/completions", json=body, headers=headers).status_code


def through_gateway(
    base_url: str, keys: tuple[str, str], model: str = "tiny"
) -> dict[str, list[int]]:
    alice, bob = keys
    with httpx.Client(base_url=base_url, timeout=TIMEOUT_S) as client:
        return {
            "session": session_turns(client, alice, model=model),
            "completion": [completion(client, alice, model)],
            "bad_key": [completion(client, "not-a-key", model)],
            "burst": burst(base_url, bob, model),
        }


def speculative(base_url: str, model: str, requests: int = 3) -> list[int]:
    """Requests straight to the MTP vLLM: drafts, accepted tokens per position."""
    with httpx.Client(base_url=base_url, timeout=TIMEOUT_S) as client:
        return [completion(client, "", model, max_tokens=24) for _ in range(requests)]


def dead_upstream(base_url: str, key: str) -> list[int]:
    """One request through a gateway whose vLLM does not answer (connect error)."""
    with httpx.Client(base_url=base_url, timeout=TIMEOUT_S) as client:
        return [completion(client, key)]


def gateway_app(upstream: str, state_dir: Path, control_url: str | None = None) -> Any:
    """The gateway the dashboard checks drive (one stream per key, one waiting), so that
    the admission panels move under `through_gateway`."""
    settings = load_settings(
        upstream_url=upstream,
        api_keys=f"alice:{KEYS[0]},bob:{KEYS[1]}",
        control_url=control_url,
        state_dir=state_dir,
        max_concurrency_per_key=1,
        queue_size=1,
        connect_timeout_seconds=2.0,
    )
    return create_app(settings)


def scrape(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=10).text
