"""When vLLM's KV capacity is not the plan's: which term of the arithmetic differs.

The terms, in the order vLLM computes them (docs/kv-arithmetic.md): the attention block
size (hybrids log it), the groups and their padding layers, the blocks one
max_model_len request takes, and the pool's bytes.  Each is compared beyond what the
log's rounding hides; the start-up line names the ones that differ and
`sparkserve_budget_capacity_difference{term}` exports observed − planned for each.
"""

from __future__ import annotations

from dataclasses import dataclass

from budget.plan import Plan
from budget.units import GiB
from entrypoint.logscan import Observed

HALF_LOGGED_GIB = 0.005 * GiB  # "Available KV cache memory: X.XX GiB"
HALF_LOGGED_CONCURRENCY = 0.005  # "Maximum concurrency …: X.XXx"
TERMS = ("block_size", "padding_layers", "blocks_per_request", "pool_bytes")


@dataclass(frozen=True)
class Term:
    name: str  # one of TERMS
    planned: int
    observed: int
    differs: bool  # beyond the log's rounding

    def describe(self) -> str:
        words = self.name.replace("_", " ")
        if self.name == "pool_bytes":
            return (
                f"{words}: planned {self.planned / GiB:.2f} GiB, vLLM {self.observed / GiB:.2f} GiB"
            )
        return f"{words}: planned {self.planned:,}, vLLM {self.observed:,}"


def _pool(plan: Plan, seen: Observed) -> Term | None:
    if seen.kv_cache_bytes is None:
        return None
    differs = abs(seen.kv_cache_bytes - plan.kv_cache_bytes) > HALF_LOGGED_GIB
    return Term("pool_bytes", plan.kv_cache_bytes, seen.kv_cache_bytes, differs)


def _blocks_per_request(plan: Plan, seen: Observed, block_size: int) -> Term | None:
    """Per-request blocks implied by the logged concurrency over the blocks the logged
    pool holds (pages grow with the block size)."""
    concurrency = seen.max_concurrency
    if concurrency is None or concurrency <= HALF_LOGGED_CONCURRENCY:
        return None
    layout = plan.layout
    pool = seen.kv_cache_bytes if seen.kv_cache_bytes is not None else plan.kv_cache_bytes
    half = HALF_LOGGED_GIB if seen.kv_cache_bytes is not None else 0  # the pool's rounding
    bytes_per_block = layout.bytes_per_block * block_size // layout.block_size
    num_blocks = pool // bytes_per_block
    low = (pool - half) // bytes_per_block / (concurrency + HALF_LOGGED_CONCURRENCY)
    high = (pool + half) // bytes_per_block / (concurrency - HALF_LOGGED_CONCURRENCY)
    planned = layout.blocks_per_request
    return Term(
        "blocks_per_request", planned, round(num_blocks / concurrency), not low <= planned <= high
    )


def capacity_terms(plan: Plan, seen: Observed) -> tuple[Term, ...]:
    """Each term vLLM's log lets us see (none before its capacity line)."""
    if seen.kv_cache_tokens is None:
        return ()
    layout = plan.layout
    block = layout.block_size if seen.block_size is None else seen.block_size
    terms = [Term("block_size", layout.block_size, block, block != layout.block_size)]
    padding = seen.padding_layers or 0
    terms.append(
        Term("padding_layers", layout.padding_layers, padding, padding != layout.padding_layers)
    )
    terms += [t for t in (_blocks_per_request(plan, seen, block), _pool(plan, seen)) if t]
    return tuple(terms)


def capacity_line(plan: Plan, seen: Observed) -> str | None:
    """One line naming the terms that differ, or None when the capacity is as planned."""
    differing = [term for term in capacity_terms(plan, seen) if term.differs]
    if not differing or seen.kv_cache_tokens is None:
        return None
    return (
        f"KV capacity differs from the plan: vLLM {seen.kv_cache_tokens:,} tokens, "
        f"planned {plan.kv_cache_tokens:,} — " + "; ".join(t.describe() for t in differing)
    )
