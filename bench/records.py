"""One measured request: what the client saw, in seconds from the run's start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from bench.stats import gaps


@dataclass(frozen=True)
class RequestRecord:
    """A streamed chat completion.  Times are seconds since the run started.

    `chunk_times_s` are the arrival times of every chunk that carried output
    text; `cached_tokens` is `usage.prompt_tokens_details.cached_tokens` (None
    when the server does not report it).
    """

    workload: str
    target: str
    group: str
    index: int
    start_s: float
    end_s: float
    chunk_times_s: tuple[float, ...]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times_s[0] - self.start_s if self.chunk_times_s else None

    @property
    def first_token_s(self) -> float | None:
        return self.chunk_times_s[0] if self.chunk_times_s else None

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def chunk_gaps_s(self) -> list[float]:
        return gaps(self.chunk_times_s)

    @property
    def itl_s(self) -> float | None:
        """Mean time per output token after the first (chunks may carry several)."""
        if self.completion_tokens < 2 or len(self.chunk_times_s) < 2:
            return None
        return (self.chunk_times_s[-1] - self.chunk_times_s[0]) / (self.completion_tokens - 1)

    @property
    def recomputed_tokens(self) -> int:
        return self.prompt_tokens - (self.cached_tokens or 0)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["chunk_times_s"] = [round(t, 6) for t in self.chunk_times_s]
        data["ttft_s"] = self.ttft_s
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestRecord:
        return cls(
            workload=str(data["workload"]),
            target=str(data["target"]),
            group=str(data["group"]),
            index=int(data["index"]),
            start_s=float(data["start_s"]),
            end_s=float(data["end_s"]),
            chunk_times_s=tuple(float(t) for t in data["chunk_times_s"]),
            prompt_tokens=int(data["prompt_tokens"]),
            completion_tokens=int(data["completion_tokens"]),
            cached_tokens=None if data.get("cached_tokens") is None else int(data["cached_tokens"]),
            error=data.get("error"),
        )
