"""`python -m draftvocab` on a tiny real Qwen3.5 checkpoint (tests/draftvocab/tiny_qwen3_5.py),
text-only and in the published multimodal layout, read back with the safetensors library
and with transformers' Qwen3.5 config classes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, Qwen3_5Config, Qwen3_5TextConfig

from tests.draftvocab import tiny_qwen3_5

ROWS = 512  # of the tiny model's 1,024
EVEN_COUNTS = {t: 2000 - t for t in range(0, 1024, 2)}  # even ids, lower ones more frequent
SPECIAL = {0, 1, 2}  # the tiny tokenizer's special tokens


def _draftvocab(src: Path, out: Path, counts: dict[int, int]) -> subprocess.CompletedProcess[str]:
    counts_file = out.parent / f"{out.name}-counts.json"
    counts_file.write_text(json.dumps({str(k): v for k, v in counts.items()}))
    return subprocess.run(
        [sys.executable, "-m", "draftvocab", str(src), "--out", str(out), "--rows", str(ROWS),
         "--counts", str(counts_file)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _tensor(path: Path, name: str) -> torch.Tensor:
    with safe_open(path, framework="pt") as f:
        return f.get_tensor(name)


def _targets(dst: Path) -> list[int]:
    d2t = _tensor(dst / "draft-vocab.safetensors", "mtp.draft_lm_head.d2t")
    return (torch.arange(len(d2t)) + d2t).tolist()


@pytest.fixture(scope="module")
def text_only(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("qwen3_5")
    src = tiny_qwen3_5.write(root / "src")
    made = _draftvocab(src, root / "dst", EVEN_COUNTS)
    assert made.returncode == 0, made.stderr
    return src, root / "dst"


def test_the_head_is_the_kept_rows_of_the_qwen3_5_lm_head(text_only):
    src, dst = text_only
    targets = _targets(dst)
    assert len(set(targets)) == ROWS and SPECIAL <= set(targets)
    assert all(t % 2 == 0 for t in set(targets) - SPECIAL)  # the counted ids, nothing else
    head = _tensor(dst / "draft-vocab.safetensors", "mtp.draft_lm_head.weight")
    assert torch.equal(head, _tensor(src / "model.safetensors", "lm_head.weight")[targets])


def test_transformers_reads_the_qwen3_5_config_with_its_draft_rows(text_only):
    config = AutoConfig.from_pretrained(text_only[1])
    assert isinstance(config, Qwen3_5TextConfig)
    assert config.draft_vocab_size == ROWS and config.mtp_num_hidden_layers == 1


def test_the_index_names_the_source_weights_and_the_new_shard(text_only):
    src, dst = text_only
    weight_map = json.loads((dst / "model.safetensors.index.json").read_text())["weight_map"]
    with safe_open(src / "model.safetensors", framework="pt") as f:
        source_names = set(f.keys())
    assert {n for n, file in weight_map.items() if file == "model.safetensors"} == source_names
    assert {n for n, file in weight_map.items() if file == "draft-vocab.safetensors"} == {
        "mtp.draft_lm_head.weight",
        "mtp.draft_lm_head.d2t",
    }


def _multimodal(directory: Path, *, eos: int, tied: str | None = None) -> Path:
    """Qwen3.5's published layout (Qwen3_5ForConditionalGeneration): the language model's
    config and token ids under `text_config`, its weights under `model.language_model.`."""
    tiny_qwen3_5.write(directory)
    text = json.loads((directory / "config.json").read_text())
    for key in ("architectures", "bos_token_id", "eos_token_id", "tie_word_embeddings"):
        text.pop(key)
    text |= {"eos_token_id": eos, "bos_token_id": eos, "tie_word_embeddings": tied == "text"}
    config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
              "text_config": text, "tie_word_embeddings": tied == "top"}  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config))
    with safe_open(directory / "model.safetensors", framework="pt") as f:
        state = {
            name.replace("model.", "model.language_model.", 1): f.get_tensor(name)
            for name in f.keys()
        }
    state["model.visual.merger.linear_fc2.weight"] = torch.randn(128, 64)
    save_file(state, directory / "model.safetensors")
    return directory


def test_a_multimodal_qwen3_5_gets_its_rows_in_the_text_config_and_keeps_its_eos(tmp_path):
    src = _multimodal(tmp_path / "src", eos=901)  # odd: never counted, kept only as eos
    made = _draftvocab(src, tmp_path / "dst", EVEN_COUNTS)
    assert made.returncode == 0, made.stderr
    assert 901 in _targets(tmp_path / "dst")
    written = json.loads((tmp_path / "dst" / "config.json").read_text())
    assert written["text_config"]["draft_vocab_size"] == ROWS and "draft_vocab_size" not in written
    config = AutoConfig.from_pretrained(tmp_path / "dst")
    assert isinstance(config, Qwen3_5Config)
    assert config.get_text_config().draft_vocab_size == ROWS


@pytest.mark.parametrize("where", ["top", "text"])
def test_tied_embeddings_in_either_config_are_exit_2(tmp_path, where):
    src = _multimodal(tmp_path / "src", eos=2, tied=where)
    made = _draftvocab(src, tmp_path / "dst", EVEN_COUNTS)
    assert made.returncode == 2, made.stdout
    assert "tie_word_embeddings is true" in made.stderr and len(made.stderr.splitlines()) == 1


def test_the_moe_checkpoint_served_on_vllm_0_24_has_the_published_layout(tmp_path):
    """tiny_qwen3_5.write_moe, the checkpoint the GPU equality run served: transformers
    reads it as Qwen3.5-MoE, its language model's tensors sit under model.language_model,
    it has no vision weights (vLLM serves it with --language-model-only), and the tool
    writes draft_vocab_size into text_config."""
    src = tiny_qwen3_5.write_moe(tmp_path / "src")
    config = AutoConfig.from_pretrained(src)
    assert type(config).__name__ == "Qwen3_5MoeConfig"
    assert config.text_config.num_experts == 4 and config.text_config.mtp_num_hidden_layers == 1
    with safe_open(src / "model.safetensors", framework="pt") as f:
        names = list(f.keys())
    assert "lm_head.weight" in names and "mtp.fc.weight" in names
    assert not any(n.startswith("model.visual") for n in names)
    decoder = [n for n in names if n.startswith("model.") and n != "model.language_model"]
    assert decoder and all(n.startswith("model.language_model.") for n in decoder)
    assert any(".mlp.experts.3.down_proj.weight" in n for n in names if n.startswith("mtp."))
    made = _draftvocab(src, tmp_path / "dst", EVEN_COUNTS)
    assert made.returncode == 0, made.stderr
    written = json.loads((tmp_path / "dst" / "config.json").read_text())
    assert written["text_config"]["draft_vocab_size"] == ROWS
    assert "draft_vocab_size" not in written
