"""Which target rows the drafter keeps: the most frequent tokens of the counts, always with
the special and chat-template tokens (pure: the CLI reads the files)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from draftvocab.errors import DraftVocabError


@dataclass(frozen=True)
class Selection:
    rows: tuple[int, ...]  # target token ids kept, ascending: draft id i ↔ rows[i]
    kept: int  # how many of them were kept as special or chat-template tokens
    coverage: float  # share of the counted tokens that fall in `rows`


def select_rows(
    counts: Mapping[int, int], always: set[int], rows: int, vocab_size: int
) -> Selection:
    """`always` plus the most frequent other ids of `counts` (ties: the lower id), `rows` in
    all; ids no count names fill up in id order when the counts run out."""
    if not 1 <= rows <= vocab_size:
        raise DraftVocabError(f"rows={rows}; must be between 1 and the vocabulary ({vocab_size})")
    bad = [token for token in (*counts, *always) if not 0 <= token < vocab_size]
    if bad:
        raise DraftVocabError(f"token id {bad[0]} is outside the vocabulary (0-{vocab_size - 1})")
    if len(always) > rows:
        raise DraftVocabError(
            f"rows={rows}; the {len(always)} special and chat-template tokens need "
            "at least that many"
        )
    ranked = sorted(counts, key=lambda token: (-counts[token], token))
    chosen = set(always)
    for token in (*ranked, *range(vocab_size)):
        if len(chosen) == rows:
            break
        chosen.add(token)
    total = sum(counts.values())
    covered = sum(count for token, count in counts.items() if token in chosen)
    return Selection(tuple(sorted(chosen)), len(always), covered / total if total else 0.0)


def parse_counts(text: str, source: str) -> dict[int, int]:
    """`--counts`: a JSON object of token id → count."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DraftVocabError(f"{source}: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise DraftVocabError(f"{source}: must be a JSON object of token id → count")
    counts = {}
    for key, value in raw.items():
        if not key.strip().isdigit() or not isinstance(value, int) or value < 0:
            raise DraftVocabError(
                f"{source}: entry {key!r}: {value!r}; each entry must be a token id → a count ≥ 0"
            )
        counts[int(key)] = value
    return counts


def count_corpus(tokenizer_file: Path, text: str) -> dict[int, int]:
    """Token counts of `text` by the model's own tokenizer (tokenizer.json)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    counts: Counter[int] = Counter()
    for line in text.splitlines():
        counts.update(tokenizer.encode(line, add_special_tokens=False).ids)
    return dict(counts)


def special_and_template_ids(
    added: Iterable[tuple[int, str, bool]], chat_template: str
) -> set[int]:
    """Ids of the special added tokens and of every added token the chat template writes
    (`<|im_start|>`, `<think>`, …); `added` is (id, content, special) per added token."""
    return {token for token, content, special in added if special or content in chat_template}
