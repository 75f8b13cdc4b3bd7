"""Qwen3-Next's MTP drafter with the reduced head of `python -m draftvocab` (loaded by the
plugin, never imported otherwise: it imports vLLM's model classes)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
from vllm.model_executor.models.qwen3_next_mtp import Qwen3NextMTP

from draftvocab.checkpoint import D2T, HEAD
from draftvocab.plugin import log


class Qwen3NextDraftVocabMTP(Qwen3NextMTP):
    """Proposes from `draft_vocab_size` rows (config.json) and maps each back to its target
    id; without `draft_vocab_size` it is vLLM's drafter unchanged."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        rows = getattr(self.config, "draft_vocab_size", None)
        self.draft_rows: int | None = int(rows) if rows else None
        if self.draft_rows is None:
            return
        self.draft_lm_head = ParallelLMHead(
            self.draft_rows, self.config.hidden_size, prefix=f"{prefix}.draft_lm_head"
        )
        self.draft_logits_processor = LogitsProcessor(self.draft_rows)
        self.draft_id_to_target_id = nn.Parameter(
            torch.zeros(self.draft_rows, dtype=torch.long), requires_grad=False
        )
        log.info(
            "sparkserve draft vocabulary: the MTP drafter proposes from %d of %d rows",
            self.draft_rows,
            self.config.vocab_size,
        )

    def compute_logits(
        self, hidden_states: torch.Tensor, spec_step_idx: int = 0
    ) -> torch.Tensor | None:
        if self.draft_rows is None:
            logits: torch.Tensor | None = super().compute_logits(hidden_states, spec_step_idx)
            return logits
        reduced: torch.Tensor | None = self.draft_logits_processor(
            self.draft_lm_head, hidden_states
        )
        if reduced is None:
            return None
        base = torch.arange(self.draft_rows, device=reduced.device)
        full = reduced.new_full((reduced.shape[0], self.config.vocab_size), float("-inf"))
        full[:, base + self.draft_id_to_target_id] = reduced
        return full

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        loaded: set[str] = set()

        def rest() -> Iterable[tuple[str, torch.Tensor]]:
            for name, tensor in weights:
                if name == HEAD and self.draft_rows is not None:
                    head = self.draft_lm_head.weight
                    assert isinstance(head, nn.Parameter)
                    self.draft_lm_head.weight_loader(head, tensor)
                    loaded.add("draft_lm_head.weight")
                elif name == D2T and self.draft_rows is not None:
                    self.draft_id_to_target_id.data.copy_(tensor)
                    loaded.add("draft_id_to_target_id")
                elif name not in (HEAD, D2T):
                    yield name, tensor

        return super().load_weights(rest()) | loaded
