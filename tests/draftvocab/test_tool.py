"""`python -m draftvocab` on small real checkpoints written here (safetensors), read back
with the safetensors library."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from devtools.tiny_model import write_tiny_model
from draftvocab import vocab
from draftvocab.errors import DraftVocabError

VOCAB, HIDDEN = 1024, 16


def _checkpoint(directory: Path, *, mtp: bool = True, tied: bool = False, shards: int = 1) -> Path:
    """The tiny model's tokenizer and config, with a few real bf16 tensors in `shards` files."""
    write_tiny_model(directory, "hybrid-mtp")
    config = json.loads((directory / "config.json").read_text())
    config["tie_word_embeddings"] = tied
    (directory / "config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    tensors = {
        "model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16),
        "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        "lm_head.weight": torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16),
    }
    if mtp:
        tensors["mtp.fc.weight"] = torch.randn(HIDDEN, 2 * HIDDEN, dtype=torch.bfloat16)
    names = list(tensors)
    if shards == 1:
        save_file(tensors, directory / "model.safetensors")
        return directory
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: tensors[name] for name in names[i::shards]}
        save_file(part, directory / file)
        weight_map |= dict.fromkeys(part, file)
    index = {"metadata": {}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return directory


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "draftvocab", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _counts(path: Path, counts: dict[int, int]) -> Path:
    path.write_text(json.dumps({str(k): v for k, v in counts.items()}))
    return path


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


@pytest.mark.parametrize("shards", [1, 2])
def test_the_head_holds_the_kept_rows_and_the_map_leads_back_to_them(tmp_path, shards):
    src = _checkpoint(tmp_path / "src", shards=shards)
    before = _digest(src)
    counts = {token: 5000 - token for token in range(100, 1024, 3)}  # lower ids more frequent
    result = _run(src, "--out", tmp_path / "dst", "--rows", 64, "--counts",
                  _counts(tmp_path / "c.json", counts))  # fmt: skip
    assert result.returncode == 0, result.stderr
    dst = tmp_path / "dst"
    with safe_open(dst / "draft-vocab.safetensors", framework="pt") as f:
        head = f.get_tensor("mtp.draft_lm_head.weight")
        d2t = f.get_tensor("mtp.draft_lm_head.d2t")
    targets = (torch.arange(64) + d2t).tolist()
    assert targets == sorted(set(targets)) and len(targets) == 64
    # eos (2) and bos (0) always; the tokenizer's special tokens; the rest by frequency.
    assert {0, 2} <= set(targets)
    assert set(range(100, 100 + 3 * 20, 3)) <= set(targets)
    assert 1021 not in targets  # the least frequent counted id
    lm_head = {}
    for file in {p.resolve() for p in src.glob("*.safetensors")}:
        with safe_open(file, framework="pt") as f:
            if "lm_head.weight" in f.keys():
                lm_head = f.get_tensor("lm_head.weight")
    assert torch.equal(head, lm_head[targets])
    assert json.loads((dst / "config.json").read_text())["draft_vocab_size"] == 64
    weight_map = json.loads((dst / "model.safetensors.index.json").read_text())["weight_map"]
    assert weight_map["mtp.draft_lm_head.weight"] == "draft-vocab.safetensors"
    assert all((dst / file).exists() for file in weight_map.values())
    linked = [p for p in dst.iterdir() if p.name.endswith(".safetensors") and p.is_symlink()]
    assert len(linked) == shards and (dst / "tokenizer.json").is_symlink()
    assert _digest(src) == before  # the source is never altered
    assert "+2,560 bytes" in result.stdout  # 64 rows × 16 × 2 B + 64 × 8 B


def test_coverage_is_the_share_of_counted_tokens_kept(tmp_path):
    src = _checkpoint(tmp_path / "src")
    counts = {10: 50, 11: 30, 12: 15, 13: 5}  # 100 tokens
    result = _run(src, "--out", tmp_path / "dst", "--rows", 200, "--counts",
                  _counts(tmp_path / "c.json", counts))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "coverage of the counts 100.0% (100 tokens counted)" in result.stdout
    many = {token: 1 for token in range(300, 1000)}  # 700 tokens, most of them cut
    result = _run(src, "--out", tmp_path / "dst2", "--rows", 200, "--counts",
                  _counts(tmp_path / "c2.json", many))  # fmt: skip
    # The tiny tokenizer's three special tokens (ids 0-2, eos and bos among them) are kept
    # first: 197 of the 700 counted ids remain.
    assert "(3 special and chat-template tokens among them)" in result.stdout
    assert f"coverage of the counts {197 / 700:.1%}" in result.stdout


def test_a_corpus_is_counted_with_the_models_tokenizer(tmp_path):
    src = _checkpoint(tmp_path / "src")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the agent reads a file\nthe tests pass\n" * 50)
    result = _run(src, "--out", tmp_path / "dst", "--rows", 200, "--corpus", corpus)
    assert result.returncode == 0, result.stderr
    assert "coverage of the counts 100.0%" in result.stdout


def test_selection_keeps_the_always_tokens_then_the_most_frequent():
    chosen = vocab.select_rows({5: 1, 6: 9, 7: 9, 8: 4}, always={0}, rows=3, vocab_size=10)
    assert chosen.rows == (0, 6, 7)  # ties by the lower id
    assert chosen.coverage == pytest.approx(18 / 23)


def test_rows_beyond_the_counts_fill_up_in_id_order():
    chosen = vocab.select_rows({9: 1}, always=set(), rows=3, vocab_size=10)
    assert chosen.rows == (0, 1, 9)


@pytest.mark.parametrize(
    ("counts", "always", "rows", "message"),
    [
        ({}, set(), 0, "rows=0; must be between 1 and the vocabulary (10)"),
        ({}, set(), 11, "rows=11; must be between 1 and the vocabulary (10)"),
        ({12: 1}, set(), 5, "token id 12 is outside the vocabulary (0-9)"),
        ({}, {1, 2, 3}, 2, "rows=2; the 3 special and chat-template tokens need at least"),
    ],
)
def test_selection_refuses(counts, always, rows, message):
    with pytest.raises(DraftVocabError, match=message.replace("(", r"\(").replace(")", r"\)")):
        vocab.select_rows(counts, always, rows, vocab_size=10)


def _bad_index(directory: Path) -> None:
    index = {"weight_map": {"lm_head.weight": "model-00009.safetensors"}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


def _truncated(directory: Path) -> None:
    shard = directory / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: _checkpoint(d, mtp=False), "has no MTP module (no mtp.* weights)"),
        (lambda d: _checkpoint(d, tied=True), "tie_word_embeddings is true"),
        (lambda d: _bad_index(_checkpoint(d)), "names model-00009.safetensors, which is not in"),
        (lambda d: _truncated(_checkpoint(d)), "truncated"),
        (lambda d: d.mkdir(), "config.json is missing"),
    ],
    ids=["no-mtp", "tied", "index-names-absent-shard", "truncated", "no-config"],
)
def test_bad_checkpoints_are_one_line_and_exit_2(tmp_path, make, message):
    make(tmp_path / "src")
    counts = _counts(tmp_path / "c.json", {5: 1})
    result = _run(tmp_path / "src", "--out", tmp_path / "dst", "--rows", 32, "--counts", counts)
    assert result.returncode == 2, result.stdout
    (line,) = result.stderr.splitlines()
    assert line.startswith("draftvocab: error: ") and message in line, line
    assert not (tmp_path / "dst").exists()


def test_bad_counts_and_a_used_out_dir_are_refused(tmp_path):
    src = _checkpoint(tmp_path / "src")
    bad = tmp_path / "bad.json"
    bad.write_text('{"7": -1}')
    result = _run(src, "--out", tmp_path / "dst", "--counts", bad, "--rows", 32)
    assert result.returncode == 2 and "each entry must be a token id → a count ≥ 0" in result.stderr
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    result = _run(src, "--out", tmp_path / "used", "--counts", _counts(tmp_path / "c.json", {}))
    assert result.returncode == 2 and "exists and is not empty" in result.stderr
