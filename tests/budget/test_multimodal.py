"""A multimodal Gemma or Qwen3.5 checkpoint is planned as its language model, with vLLM
told to skip the towers (--language-model-only).

The Gemma configs are Google's published ones (fixtures/multimodal/README.md); the
Qwen3.5 one is the draft-vocab tests' tiny checkpoint (tests/draftvocab/tiny_qwen3_5.py).
Figures are worked by hand from the configs, transformers' Gemma3TextConfig defaults and
vLLM's source (gemma3.py, gemma3_mm.py, qwen3_5.py, config/model.py
`_get_and_verify_max_len`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from budget.cli import main
from devtools.tiny_model import config_for
from tests.draftvocab.tiny_qwen3_5 import moe_config

CONFIGS = Path(__file__).parent / "fixtures" / "multimodal"
GEMMA3 = CONFIGS / "gemma-3-27b-it.json"
GEMMA4 = CONFIGS / "gemma-4-31B-it.json"


def _plan(
    tmp_path: Path, config: Path | dict[str, Any], capsys: pytest.CaptureFixture[str], *extra: str
) -> dict[str, Any]:
    if isinstance(config, Path):
        shutil.copy(config, tmp_path / "config.json")
    else:
        (tmp_path / "config.json").write_text(json.dumps(config))
    args = ["plan", "--model", str(tmp_path), "--hardware", "h200", "--json", *extra]
    assert main(args) in (0, 1), capsys.readouterr().err
    plan: dict[str, Any] = json.loads(capsys.readouterr().out)
    return plan


def test_gemma_3_27b_is_its_language_model_with_the_towers_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, GEMMA3, capsys, "--max-model-len", "131072")
    assert plan["vllm_args"].count("--language-model-only") == 1
    w = plan["components"]
    # text_config leaves the vocabulary out: Gemma3TextConfig's 262,208, tied.
    assert w["weights.embeddings"] == 262_208 * 5376 * 2
    assert "weights.lm_head" not in w
    # q 32 × 128, k and v 16 × 128, o back to 5,376, and q/k norms of 128, in 62 layers.
    assert w["weights.attention"] == 62 * (5376 * (4096 + 2048 + 2048) + 4096 * 5376 + 256) * 2
    assert w["weights.dense_mlp"] == 62 * 3 * 5376 * 21504 * 2
    # Four RMSNorms around each layer's two blocks, and the final one.
    assert w["weights.norms"] == (62 * 4 + 1) * 5376 * 2
    assert not any("vision" in name for name in w)


def test_gemma_3_27b_keeps_its_context_unscaled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rope_scaling` factor 8 (linear): vLLM multiplies the derived length by a linear
    factor except for Gemma 3, so the limit is Gemma3TextConfig's 131,072."""
    plan = _plan(tmp_path, GEMMA3, capsys)
    assert plan["context_limit"] == {"max_model_len": 131_072, "key": "max_position_embeddings"}
    scaled = tmp_path / "llama"
    scaled.mkdir()
    llama = config_for("gqa") | {"rope_scaling": {"factor": 8.0, "rope_type": "linear"}}
    assert _plan(scaled, llama, capsys)["context_limit"]["max_model_len"] == 8 * 4096


def test_gemma_3_27b_groups_52_sliding_and_10_full_layers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Layer i is full iff (i + 1) % 6 == 0: 10 full and 52 sliding layers.  vLLM groups
    by the smaller count, 10: 6 sliding groups (8 padding slots) and 1 full group; a page
    holds 16 tokens × 16 heads × 128 × K,V × 2 B."""
    layout = _plan(tmp_path, GEMMA3, capsys, "--max-model-len", "131072")["kv_layout"]
    assert (layout["num_groups"], layout["group_size"], layout["padding_layers"]) == (7, 10, 8)
    assert layout["num_sliding_groups"] == 6
    assert layout["page_bytes"] == 16 * 16 * 128 * 2 * 2


def test_gemma_4_31b_is_its_language_model_with_the_towers_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, GEMMA4, capsys, "--max-model-len", "131072")
    assert plan["vllm_args"].count("--language-model-only") == 1
    assert plan["context_limit"]["max_model_len"] == 262_144
    text = tmp_path / "text"
    text.mkdir()
    config = json.loads(GEMMA4.read_text())
    as_text = config["text_config"] | {"architectures": ["Gemma4ForCausalLM"]}
    same = _plan(text, as_text, capsys, "--max-model-len", "131072")
    assert "--language-model-only" not in same["vllm_args"]
    assert (same["components"], same["kv_layout"]) == (plan["components"], plan["kv_layout"])


def _tensor(*shape: int) -> np.ndarray:
    return np.zeros(shape, dtype=np.float16)


def test_checkpoint_headers_count_the_language_model_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM loads no tower tensor under --language-model-only, so their bytes stay out."""
    config = config_for("gemma3-mm")
    text = config["text_config"]
    hidden, vocab = text["hidden_size"], text["vocab_size"]
    tensors = {
        "language_model.model.embed_tokens.weight": _tensor(vocab, hidden),
        "language_model.model.layers.0.self_attn.q_proj.weight": _tensor(256, hidden),
        "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight": _tensor(128, 64),
        "multi_modal_projector.mm_input_projection_weight": _tensor(64, hidden),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    plan = _plan(tmp_path, config, capsys, "--max-model-len", "3000")
    weights = {k: v for k, v in plan["components"].items() if k.startswith("weights.")}
    # float16 on disk, cast to the model's bfloat16: 2 bytes per element either way.
    assert weights == {
        "weights.embeddings": vocab * hidden * 2,
        "weights.attention": 256 * hidden * 2,
    }
    assert plan["weights_source"]["tensors"]["vision"] == 2


@pytest.mark.parametrize(
    ("profile", "config"), [("gemma-3-27b-it", GEMMA3), ("gemma-4-31b-it", GEMMA4)]
)
def test_the_profile_plans_as_the_published_config(
    profile: str, config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The profile keeps only the fields the planner reads; its plan on one Spark at the
    model's full context is the published file's, and it fits."""
    from_file = _plan(tmp_path, config, capsys, "--hardware", "dgx-spark")
    assert main(["plan", "--model", profile, "--json"]) == 0, capsys.readouterr().err
    from_profile = json.loads(capsys.readouterr().out)
    for key in ("components", "kv_layout", "kv_cache_tokens", "context_limit", "fits"):
        assert from_profile[key] == from_file[key], key
    assert from_profile["fits"] is True
    assert "--language-model-only" in from_profile["vllm_args"]


@pytest.mark.parametrize("profile", ["qwen3.8-flash-next", "qwen3.8-27b"])
def test_the_qwen3_5_profiles_skip_the_vision_tower(
    profile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both profiles name a Qwen3.5 wrapper with no `vision_config`: without the flag,
    vLLM would build transformers' default 27-block vision tower and profile it."""
    assert main(["plan", "--model", profile, "--json"]) in (0, 1), capsys.readouterr().err
    plan = json.loads(capsys.readouterr().out)
    assert plan["vllm_args"].count("--language-model-only") == 1


def test_qwen3_5_moe_is_its_language_model_with_the_tower_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The multimodal wrapper plans as its text model (Qwen3_5MoeForCausalLM) does, plus
    the flag; Qwen3-Next, a text model, gets no flag."""
    config = moe_config()
    wrapped = _plan(tmp_path, config, capsys, "--max-model-len", "4096")
    assert wrapped["vllm_args"].count("--language-model-only") == 1
    text = tmp_path / "text"
    text.mkdir()
    as_text = config["text_config"] | {"architectures": ["Qwen3_5MoeForCausalLM"]}
    same = _plan(text, as_text, capsys, "--max-model-len", "4096")
    assert "--language-model-only" not in same["vllm_args"]
    assert (same["components"], same["kv_layout"]) == (wrapped["components"], wrapped["kv_layout"])
    nxt = tmp_path / "next"
    nxt.mkdir()
    assert "--language-model-only" not in _plan(nxt, config_for("hybrid-mtp"), capsys)["vllm_args"]


def test_qwen3_5_checkpoint_headers_leave_the_visual_tensors_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Qwen3.5's published names: the language model under `model.language_model.`, the
    tower under `model.visual.` (qwen3_vl.py's `hf_to_vllm_mapper`, which qwen3_5.py's
    wrappers extend)."""
    config = moe_config()
    text = config["text_config"]
    hidden, vocab = text["hidden_size"], text["vocab_size"]
    tensors = {
        "model.language_model.embed_tokens.weight": _tensor(vocab, hidden),
        "model.language_model.layers.3.self_attn.o_proj.weight": _tensor(hidden, 128),
        "model.visual.blocks.0.mlp.linear_fc1.weight": _tensor(64, 32),
        "model.visual.merger.linear_fc2.weight": _tensor(hidden, 128),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    plan = _plan(tmp_path, config, capsys, "--max-model-len", "4096")
    weights = {k: v for k, v in plan["components"].items() if k.startswith("weights.")}
    # float16 on disk, cast to the config's float32: 4 bytes per element.
    assert weights == {
        "weights.embeddings": vocab * hidden * 4,
        "weights.attention": hidden * 128 * 4,
    }
    assert plan["weights_source"]["tensors"]["vision"] == 2
