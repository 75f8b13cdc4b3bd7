"""Is vLLM's engine making progress? `/health` cannot say.

vLLM's `/health` asks only whether the engine has errored, so an engine process that
hangs (or is stopped, SIGSTOP) keeps it at 200 while every request waits forever. The
entrypoint therefore reads vLLM's own `/metrics` and calls the engine stalled when
requests are admitted (`vllm:num_requests_running` + `vllm:num_requests_waiting` > 0) and
none of its progress figures moved for SPARKSERVE_STALL_TIMEOUT_S: tokens generated,
prompt tokens, finished requests, preemptions, and the KV cache usage. A long chunked
prefill generates no token and credits its prompt tokens only at its end, but every
chunk takes KV blocks, so the usage grows while it runs (read in vLLM 0.32:
`v1/metrics/stats.py` credits a prefill when it completes; the scheduler's stats,
usage included, go out every step).

An engine stopped while idle never admits the next request (the gauges stay 0), so
while nothing is admitted and nothing moved for a timeout's length, the entrypoint
sends its own probe, a one-token completion, and calls the engine stalled when that
brings no answer within the timeout and none of the figures moved meanwhile (a probe
queued behind a request that came in after it proves nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

BUSY = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# Counters are read without their `_total` suffix: the parser strips it from names.
PROGRESS = (
    "vllm:generation_tokens",
    "vllm:prompt_tokens",
    "vllm:request_success",
    "vllm:num_preemptions",
    "vllm:kv_cache_usage_perc",
)


@dataclass(frozen=True)
class Progress:
    admitted: float
    marks: tuple[float, ...]


def read_progress(metrics_text: str) -> Progress:
    """Summed over engines and labels; a figure vLLM does not export counts as 0."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:  # `_created` samples can split a family: go by name
            name = sample.name.removesuffix("_total")
            if name in BUSY or name in PROGRESS:
                sums[name] = sums.get(name, 0.0) + sample.value
    return Progress(
        admitted=sum(sums.get(name, 0.0) for name in BUSY),
        marks=tuple(sums.get(name, 0.0) for name in PROGRESS),
    )


@dataclass
class StallWatch:
    """What the supervisor decides from successive readings."""

    timeout_s: float
    _marks: tuple[float, ...] | None = None
    _since: float = 0.0

    def observe(self, now: float, progress: Progress) -> str:
        """`moving`, `stalled` (admitted requests, nothing moved for the timeout),
        `probe` (nothing admitted and nothing moved for the timeout: ask vLLM) or
        `idle` (nothing admitted, the timeout not yet reached)."""
        if progress.marks != self._marks:
            self._marks, self._since = progress.marks, now
            return "moving"
        if now - self._since < self.timeout_s:
            return "moving" if progress.admitted else "idle"
        if progress.admitted:
            return "stalled"
        self._since = now  # the probe's own answer moves the marks; else ask again later
        return "probe"

    def still_for(self, now: float) -> float:
        return now - self._since


def describe(progress: Progress, seconds: float) -> str:
    return (
        f"vLLM's engine made no progress for {seconds:.1f} s with {progress.admitted:g} "
        "request(s) admitted: no token, prefill chunk, finished request or preemption"
    )
