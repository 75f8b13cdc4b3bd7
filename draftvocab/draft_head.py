"""The MTP drafter's reduced head (`python -m draftvocab`) as a module of its own, which the
plugin's drafters hold beside vLLM's full `lm_head`: the kept rows of the target's head and
their map back to target ids (loaded by the plugin, never imported otherwise: it imports
vLLM's layers)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

from draftvocab.checkpoint import D2T, HEAD
from draftvocab.mapping import scatter_to_target, to_target_ids
from draftvocab.plugin import log

NAME = "draft_head"  # the drafter's attribute, and so its parameters' prefix


class DraftHead(nn.Module):
    def __init__(self, rows: int, hidden_size: int, vocab_size: int, prefix: str) -> None:
        super().__init__()
        self.rows = rows
        self.vocab_size = vocab_size
        self.lm_head = ParallelLMHead(rows, hidden_size, prefix=f"{prefix}.lm_head")
        self.logits_processor = LogitsProcessor(rows)
        self.d2t = nn.Parameter(torch.zeros(rows, dtype=torch.long), requires_grad=False)
        # Each row's target id (row + d2t[row]), kept beside d2t so that a proposal pays
        # one scatter, not an arange, a gather and an add; not a weight (not persistent).
        self.targets: torch.Tensor
        self.register_buffer("targets", torch.arange(rows), persistent=False)

    @classmethod
    def for_config(cls, config: Any, prefix: str) -> DraftHead | None:
        """The head `draft_vocab_size` (config.json) asks for; None without it."""
        rows = getattr(config, "draft_vocab_size", None)
        if not rows:
            return None
        log.info(
            "sparkserve draft vocabulary: the MTP drafter proposes from %d of %d rows",
            int(rows),
            config.vocab_size,
        )
        return cls(int(rows), config.hidden_size, config.vocab_size, f"{prefix}.{NAME}")

    def logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        """Target-vocabulary logits, −inf outside the draft vocabulary."""
        reduced: torch.Tensor | None = self.logits_processor(self.lm_head, hidden_states)
        if reduced is None:  # not this rank's to compute
            return None
        return scatter_to_target(reduced, self.targets, self.vocab_size)

    def top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The greedy draft as target ids, without the full-vocabulary logits."""
        top: torch.Tensor = self.logits_processor.get_top_tokens(self.lm_head, hidden_states)
        return to_target_ids(top, self.d2t)

    def load(self, name: str, tensor: torch.Tensor) -> str:
        """Load one of the head's checkpoint tensors; the parameter it filled."""
        if name == HEAD:
            head = self.lm_head.weight
            assert isinstance(head, nn.Parameter)
            self.lm_head.weight_loader(head, tensor)
            return f"{NAME}.lm_head.weight"
        self.d2t.data.copy_(tensor)
        self.targets.copy_(to_target_ids(torch.arange(self.rows, device=self.d2t.device), self.d2t))
        return f"{NAME}.d2t"


def take_draft_weights(
    head: DraftHead | None, weights: Iterable[tuple[str, torch.Tensor]], loaded: set[str]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Load the reduced head's tensors into `head`, adding the parameters filled to
    `loaded` (without a head, as for a checkpoint without `draft_vocab_size`, drop them);
    yield every other weight for the drafter's own loader."""
    for name, tensor in weights:
        if name not in (HEAD, D2T):
            yield name, tensor
        elif head is not None:
            loaded.add(head.load(name, tensor))
