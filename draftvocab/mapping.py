"""Draft ids back to target ids, EAGLE-3's way (vllm/model_executor/models/llama_eagle3.py
`d2t`; vllm/model_executor/models/interfaces.py `LocalArgmaxMixin.get_top_tokens`): the
target id of draft id i is i + d2t[i]. Pure tensor functions, no vLLM."""

from __future__ import annotations

import torch


def to_target_ids(draft_ids: torch.Tensor, d2t: torch.Tensor) -> torch.Tensor:
    """Draft ids (any shape) → target ids."""
    return draft_ids + d2t[draft_ids]


def scatter_to_target(
    reduced: torch.Tensor, targets: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """Logits over the draft rows [tokens, rows] → logits over the target vocabulary
    [tokens, vocab_size]: row i's logit at `targets[i]` (its target id: `to_target_ids`
    of every draft id), −inf at every id the draft vocabulary does not hold (so no
    sampler or argmax can pick one)."""
    full = reduced.new_full((reduced.shape[0], vocab_size), float("-inf"))
    full[:, targets] = reduced
    return full
