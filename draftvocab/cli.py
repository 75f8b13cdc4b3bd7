"""`python -m draftvocab SRC_DIR --out DST_DIR [--rows N] (--corpus FILE | --counts FILE)`.

Keeps the N most frequent rows of the target's lm_head (always with the special and
chat-template tokens) as the MTP drafter's own head, with the map from draft ids back to
target ids, in a new checkpoint directory that links the unchanged files of SRC_DIR.
Serve it with the vLLM plugin (SPARKSERVE_DRAFT_VOCAB=on; docs/draft-vocab.md).
Exit 0 on success, 2 on bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from draftvocab.checkpoint import (
    D2T,
    HEAD,
    SHARD,
    Source,
    check_out,
    config_value,
    read_source,
    write_output,
)
from draftvocab.errors import DraftVocabError
from draftvocab.vocab import count_corpus, parse_counts, select_rows, special_and_template_ids

DEFAULT_ROWS = 65_536
MiB = 1024**2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m draftvocab", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("source", metavar="SRC_DIR", type=Path, help="the checkpoint (read only)")
    parser.add_argument("--out", required=True, type=Path, help="new directory to write")
    parser.add_argument(
        "--rows", type=int, default=DEFAULT_ROWS, help=f"draft vocabulary size ({DEFAULT_ROWS:,})"
    )
    counts = parser.add_mutually_exclusive_group(required=True)
    counts.add_argument("--corpus", type=Path, help="text, tokenized with the model's tokenizer")
    counts.add_argument("--counts", type=Path, help="JSON object of token id → count")
    return parser


def _json_file(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DraftVocabError(f"{path}: cannot read it ({exc})") from None
    return value if isinstance(value, dict) else {}


def _added_tokens(directory: Path) -> Iterator[tuple[int, str, bool]]:
    """(id, content, special) from tokenizer.json and tokenizer_config.json."""
    for entry in _json_file(directory / "tokenizer.json").get("added_tokens") or []:
        yield int(entry["id"]), str(entry["content"]), bool(entry.get("special"))
    decoder = _json_file(directory / "tokenizer_config.json").get("added_tokens_decoder") or {}
    for token, entry in decoder.items():
        yield int(token), str(entry.get("content", "")), bool(entry.get("special"))


def _chat_template(directory: Path) -> str:
    template = _json_file(directory / "tokenizer_config.json").get("chat_template") or ""
    jinja = directory / "chat_template.jinja"
    return str(template) + (jinja.read_text() if jinja.exists() else "")


def _end_ids(source: Source) -> set[int]:
    ids: set[int] = set()
    generation = _json_file(source.directory / "generation_config.json")
    for key in ("eos_token_id", "bos_token_id"):
        for value in (config_value(source.config, key), generation.get(key)):
            ids.update(value if isinstance(value, list) else [] if value is None else [value])
    return {int(token) for token in ids}


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise DraftVocabError(f"{path}: cannot read it ({exc})") from None


def _counts(args: argparse.Namespace, source: Source) -> dict[int, int]:
    if args.counts is not None:
        return parse_counts(_read_text(args.counts), str(args.counts))
    tokenizer = source.directory / "tokenizer.json"
    if not tokenizer.exists():
        raise DraftVocabError(f"--corpus needs the model's tokenizer: {tokenizer} is missing")
    return count_corpus(tokenizer, _read_text(args.corpus))


def run(args: argparse.Namespace) -> str:
    check_out(args.source, args.out)
    source = read_source(args.source)
    always = special_and_template_ids(_added_tokens(source.directory), _chat_template(args.source))
    always |= _end_ids(source)
    counts = _counts(args, source)
    chosen = select_rows(counts, always, args.rows, source.vocab_size)
    added = write_output(source, args.out, chosen.rows)
    total = sum(counts.values())
    return (
        f"kept {len(chosen.rows):,} of {source.vocab_size:,} rows ({chosen.kept} special and "
        f"chat-template tokens among them); coverage of the counts {chosen.coverage:.1%} "
        f"({total:,} tokens counted)\n"
        f"wrote {args.out / SHARD}: {HEAD} {source.lm_head.dtype} "
        f"[{len(chosen.rows)}, {source.lm_head.shape[1]}] and {D2T}, "
        f"+{added:,} bytes ({added / MiB:,.1f} MiB); config.json draft_vocab_size="
        f"{len(chosen.rows)}; the other files linked from {args.source}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        print(run(args))
    except DraftVocabError as exc:
        print(f"draftvocab: error: {exc}", file=sys.stderr)
        return 2
    return 0
