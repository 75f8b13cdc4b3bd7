"""Workload sizes by `--scale`: tiny (CI, seconds on 2 CPU cores), small, full."""

from __future__ import annotations

from dataclasses import dataclass

from bench.errors import BenchError


@dataclass(frozen=True)
class Scale:
    name: str
    # short chat: concurrency levels, requests per level (at least 2 per slot), sizes
    chat_concurrency: tuple[int, ...]
    chat_requests_per_level: int
    chat_prompt_words: int
    chat_max_tokens: int
    # agent loop: turns, the stable prefix, the growing tail
    agent_turns: int
    agent_rules_words: int
    agent_repo_files: int
    agent_file_words: int
    agent_tool_result_words: int
    agent_max_tokens: int
    # mixed traffic: decode streams, the long prompt (share of max_model_len), warm-up tokens
    mixed_decode_streams: int
    mixed_prompt_fill: float
    mixed_lead_tokens: int
    # long context: requests, output tokens, prompt as a share of max_model_len
    long_requests: int
    long_max_tokens: int
    long_fill: float

    def chat_requests(self, concurrency: int) -> int:
        return max(self.chat_requests_per_level, 2 * concurrency)


SCALES: dict[str, Scale] = {
    "tiny": Scale(
        name="tiny",
        chat_concurrency=(1, 2, 4),
        chat_requests_per_level=4,
        chat_prompt_words=24,
        chat_max_tokens=16,
        agent_turns=4,
        agent_rules_words=120,
        agent_repo_files=3,
        agent_file_words=60,
        agent_tool_result_words=30,
        agent_max_tokens=8,
        mixed_decode_streams=2,
        mixed_prompt_fill=0.6,
        mixed_lead_tokens=4,
        long_requests=1,
        long_max_tokens=4,
        long_fill=0.9,
    ),
    "small": Scale(
        name="small",
        chat_concurrency=(1, 2, 4, 8),
        chat_requests_per_level=8,
        chat_prompt_words=96,
        chat_max_tokens=64,
        agent_turns=8,
        agent_rules_words=600,
        agent_repo_files=6,
        agent_file_words=300,
        agent_tool_result_words=160,
        agent_max_tokens=32,
        mixed_decode_streams=2,
        mixed_prompt_fill=0.75,
        mixed_lead_tokens=8,
        long_requests=2,
        long_max_tokens=16,
        long_fill=0.95,
    ),
    "full": Scale(
        name="full",
        chat_concurrency=(1, 2, 4, 8, 16, 32),
        chat_requests_per_level=16,
        chat_prompt_words=256,
        chat_max_tokens=128,
        agent_turns=16,
        agent_rules_words=1500,
        agent_repo_files=12,
        agent_file_words=1200,
        agent_tool_result_words=600,
        agent_max_tokens=64,
        mixed_decode_streams=4,
        mixed_prompt_fill=0.8,
        mixed_lead_tokens=16,
        long_requests=3,
        long_max_tokens=32,
        long_fill=0.97,
    ),
}


def get_scale(name: str) -> Scale:
    try:
        return SCALES[name]
    except KeyError:
        raise BenchError(f"scale={name!r}; allowed: {', '.join(SCALES)}") from None
