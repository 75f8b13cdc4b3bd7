"""The multi-session agent workload that measures prefix affinity across replicas.

Each agent session has its own long system prompt, then turns that each add a user message;
the gateway's affinity key is the salted system prompt, so which replica an agent session
lands on can be predicted from the gateway's salt secret (`pick_sessions`). Used by
the in-process replica test (tests/gateway/test_replicas_vllm.py) and by the one on
containers (tests/docker/test_stack_replicas.py).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from gateway.core.routing import affinity_key, rendezvous_rank
from gateway.core.tenancy import SaltMaker

SYSTEM_WORDS = 580  # ≈ 1,100 tokens of the tiny model's tokenizer
TURN_WORDS = 140  # ≈ 270 tokens
# ≈ 100 blocks of 128 tokens at 512 bytes a token (the tiny dense model): five agent sessions'
# contexts of four turns, not nine, so that round-robin must evict.
KV_BYTES = 100 * 128 * 512
WORDS = (
    "the agent reads a file runs the tests and edits the code until every check in the "
    "repository passes then it writes a short report of what changed and why"
).split()


def text(words: int, seed: str) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def system_prompt(seed: str) -> str:
    return f"You are agent {seed}. " + text(SYSTEM_WORDS, seed)


def pick_sessions(
    secret: bytes, tenant: str, split: dict[str, int], prefix: str
) -> list[tuple[str, str]]:
    """(seed, replica) of agent sessions giving `split` (replica name → agent sessions): the hash is
    uniform, fixing the split keeps the experiment about routing, not about luck."""
    salt = SaltMaker(secret, {}).salt_for(tenant)
    names = list(split)
    wanted = dict(split)
    chosen: list[tuple[str, str]] = []
    for i in range(200):
        seed = f"{prefix}{i}"
        body = {
            "messages": [{"role": "system", "content": system_prompt(seed)}],
            "cache_salt": salt,
        }
        key = affinity_key("/v1/chat/completions", body)
        assert key is not None
        name = names[rendezvous_rank(key, names)[0]]
        if wanted[name] > 0:
            wanted[name] -= 1
            chosen.append((seed, name))
    assert not any(wanted.values())
    return chosen


@dataclass
class Session:
    seed: str
    model: str = "tiny"
    messages: list[dict[str, Any]] = field(default_factory=list)

    def next_request(self, turn: int, max_tokens: int, stream: bool) -> dict[str, Any]:
        if not self.messages:
            self.messages = [{"role": "system", "content": system_prompt(self.seed)}]
        self.messages.append({"role": "user", "content": text(TURN_WORDS, f"{self.seed}/{turn}")})
        return {
            "model": self.model,
            "messages": self.messages,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
            "stream": stream,
        }


async def call(client: httpx.AsyncClient, session: Session, body: dict[str, Any]) -> bool:
    """One request; True when it completed without an error (the reply joins the history)."""
    try:
        if not body["stream"]:
            response = await client.post("/v1/chat/completions", json=body)
            if response.status_code != 200:
                return False
            reply = response.json()["choices"][0]["message"]["content"]
        else:
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                answer = "".join([part async for part in response.aiter_text()])
            if response.status_code != 200 or '"error"' in answer or "[DONE]" not in answer:
                return False
            reply = "…"
    except httpx.HTTPError:
        return False
    session.messages.append({"role": "assistant", "content": reply})
    return True


async def _wave(
    url: str, key: str, sessions: Sequence[Session], turn: int, **kw: Any
) -> list[bool]:
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300) as client:
        calls = [call(client, s, s.next_request(turn, **kw)) for s in sessions]
        return list(await asyncio.gather(*calls))


def wave(url: str, key: str, sessions: Sequence[Session], turn: int, **kw: Any) -> list[bool]:
    """One turn of every agent session at once; which requests succeeded, in agent session order."""
    return asyncio.run(_wave(url, key, sessions, turn, **kw))
