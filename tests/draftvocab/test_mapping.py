"""Draft ids back to target ids (draftvocab/mapping.py), EAGLE-3's convention: target id =
draft id + d2t[draft id]."""

from __future__ import annotations

import torch

from draftvocab.mapping import scatter_to_target, to_target_ids

KEPT = (1, 4, 6)  # the target ids a three-row draft vocabulary keeps, of 8
D2T = torch.tensor([1 - 0, 4 - 1, 6 - 2])
TARGETS = to_target_ids(torch.arange(3), D2T)


def test_draft_ids_map_to_the_kept_target_ids():
    assert to_target_ids(torch.tensor([[2, 0], [1, 1]]), D2T).tolist() == [[6, 1], [4, 4]]
    assert TARGETS.tolist() == list(KEPT)


def test_logits_land_on_the_kept_ids_and_every_other_id_is_minus_infinity():
    reduced = torch.tensor([[0.5, -1.0, 2.0], [3.0, 0.0, -2.0]])
    full = scatter_to_target(reduced, TARGETS, vocab_size=8)
    inf = float("-inf")
    assert full.tolist() == [
        [inf, 0.5, inf, inf, -1.0, inf, 2.0, inf],
        [inf, 3.0, inf, inf, 0.0, inf, -2.0, inf],
    ]


def test_the_argmax_over_the_target_vocabulary_is_the_mapped_draft_argmax():
    reduced = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    full = scatter_to_target(reduced, TARGETS, vocab_size=8)
    assert torch.equal(full.argmax(-1), to_target_ids(reduced.argmax(-1), D2T))
