"""A tiny Qwen3-Next with an MTP module and real random float32 weights (safetensors), the
tiny model's tokenizer beside it.

Its weights are built so that MTP drafts are mostly accepted, which random weights alone
would not give: the embeddings dominate the residual stream (every layer's output
projection is scaled down), so the target's next token depends mostly on the current
one, and the MTP module's `fc` passes the next token's embedding through, so it predicts
what the target will predict one step later. The lm_head is scaled up so that greedy
choices have margins well above float32 rounding.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

from devtools.tiny_model import config_for, write_tiny_model

SEED = 0
OUTPUT_PROJECTIONS = ("out_proj.weight", "o_proj.weight", "down_proj.weight")
OUTPUT_SCALE = 0.1
LM_HEAD_STD = 1.0


def config() -> dict[str, object]:
    """The tiny hybrid-mtp config (MoE: vLLM's Qwen3-Next needs experts), in float32."""
    cfg = config_for("hybrid-mtp")
    cfg["torch_dtype"] = "float32"
    return cfg


def _per_expert(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers 5 keeps each layer's experts fused (`experts.gate_up_proj`
    [E, 2I, H], `experts.down_proj` [E, H, I]); checkpoints, and vLLM's loader, name them
    one by one (`experts.0.gate_proj.weight` …)."""
    out = {}
    for name, tensor in state.items():
        if name.endswith("experts.gate_up_proj"):
            stem = name.removesuffix("gate_up_proj")
            gate, up = tensor.chunk(2, dim=1)
            for e in range(tensor.shape[0]):
                out[f"{stem}{e}.gate_proj.weight"] = gate[e]
                out[f"{stem}{e}.up_proj.weight"] = up[e]
        elif name.endswith("experts.down_proj"):
            stem = name.removesuffix("down_proj")
            for e in range(tensor.shape[0]):
                out[f"{stem}{e}.down_proj.weight"] = tensor[e]
        else:
            out[name] = tensor
    return out


def scaled(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {
        name: tensor * OUTPUT_SCALE if name.endswith(OUTPUT_PROJECTIONS) else tensor
        for name, tensor in _per_expert(state).items()
    }


def mtp_layer_weights(model: torch.nn.Module, hidden: int) -> dict[str, torch.Tensor]:
    """The MTP module: a copy of the model's last layer (full attention, as vLLM builds the
    MTP layer), initialized with the model. A decoder layer built on its own is never
    initialized: its fused experts stayed `torch.empty`, whatever memory held (once zeros,
    once 1e18), and no draft was ever accepted."""
    last = model.get_decoder().layers[-1]
    layer = {name: tensor.detach().clone() for name, tensor in last.state_dict().items()}
    weights = {f"mtp.layers.0.{name}": t for name, t in scaled(layer).items()}
    return weights | mtp_head_weights(hidden)


def mtp_head_weights(hidden: int) -> dict[str, torch.Tensor]:
    """The MTP module's `fc` and norms (Qwen3-Next's and Qwen3.5's are named alike)."""
    fc = torch.zeros(hidden, 2 * hidden)
    fc[:, :hidden] = torch.eye(hidden)  # [embedding of the next token | hidden state]
    weights = {"mtp.fc.weight": fc}
    for norm in ("norm", "pre_fc_norm_hidden", "pre_fc_norm_embedding"):
        weights[f"mtp.{norm}.weight"] = torch.zeros(hidden)  # zero-centred: scale 1
    return weights


def write(out_dir: Path) -> Path:
    """config.json, tokenizer files and model.safetensors in `out_dir`; returns it."""
    torch.manual_seed(SEED)
    cfg = config()
    write_tiny_model(out_dir, "hybrid-mtp")
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    hf_config = Qwen3NextConfig(**{k: v for k, v in cfg.items() if k != "architectures"})
    save_with_mtp(Qwen3NextForCausalLM(hf_config), hf_config.hidden_size, out_dir)
    return out_dir


def save_with_mtp(
    model: torch.nn.Module, hidden: int, out_dir: Path, decoder_prefix: str = "model."
) -> None:
    """`model`'s weights as described above, with its MTP module, in model.safetensors;
    the decoder's tensors named under `decoder_prefix` (a multimodal checkpoint keeps them
    under `model.language_model.`)."""
    state = scaled(model.state_dict())
    state["model.embed_tokens.weight"] = torch.randn_like(state["model.embed_tokens.weight"])
    state["lm_head.weight"] = torch.randn_like(state["lm_head.weight"]) * LM_HEAD_STD
    state = {
        decoder_prefix + name.removeprefix("model.") if name.startswith("model.") else name: t
        for name, t in state.items()
    }
    state.update(mtp_layer_weights(model, hidden))
    save_file({name: t.contiguous() for name, t in state.items()}, out_dir / "model.safetensors")
