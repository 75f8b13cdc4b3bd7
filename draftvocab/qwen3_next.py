"""Qwen3-Next's MTP drafter with the reduced head of `python -m draftvocab` (loaded by the
plugin, never imported otherwise: it imports vLLM's model classes). vLLM 0.24.0 and 0.32.0
name the base class, and the methods overridden here, alike (draftvocab/plugin.py RELEASES)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from vllm.config import VllmConfig
from vllm.model_executor.models.qwen3_next_mtp import Qwen3NextMTP

from draftvocab.draft_head import DraftHead, take_draft_weights


class Qwen3NextDraftVocabMTP(Qwen3NextMTP):
    """Proposes from `draft_vocab_size` rows (config.json) and maps each back to its target
    id; without `draft_vocab_size` it is vLLM's drafter unchanged."""

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

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        loaded: set[str] = set()
        rest = take_draft_weights(self.draft_head, weights, loaded)
        return super().load_weights(rest) | loaded
