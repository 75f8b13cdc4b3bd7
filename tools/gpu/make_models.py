"""Write dummy-weight model directories for the GPU calibration runs.

Each is a public config (from budget/profiles) or the default profile's shape,
optionally with fewer layers so it fits one H200 in bf16, plus the tiny BPE
tokenizer (token ids stay far below the vocab, which is all `--load-format
dummy` needs).

    python -m tools.gpu.make_models OUT_DIR
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from entrypoint.tiny_model import _tokenizer_config, _tokenizer_json

PROFILES = Path(__file__).resolve().parents[2] / "budget" / "profiles" / "models"
# name → (profile, layer override or None)
MODELS: dict[str, tuple[str, int | None]] = {
    "dense": ("llama-3.1-8b", None),
    "moe": ("qwen3-30b-a3b", None),
    # Qwen3-Next-80B shapes with 24 of its 48 layers (18 GDN + 6 full): ≈ 40 B
    # parameters, 80 GB in bf16, so one H200 holds it with room for KV.
    "hybrid": ("qwen3-next-80b-a3b", 24),
}


def model_config(profile: str, layers: int | None) -> dict[str, Any]:
    with (PROFILES / f"{profile}.toml").open("rb") as handle:
        config = dict(tomllib.load(handle)["config"])
    if layers is not None:
        config["num_hidden_layers"] = layers
    config.update(bos_token_id=0, eos_token_id=2, pad_token_id=0)
    return config


def write_models(out: Path) -> list[Path]:
    tokenizer = _tokenizer_json()
    written = []
    for name, (profile, layers) in MODELS.items():
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        (target / "config.json").write_text(json.dumps(model_config(profile, layers), indent=2))
        (target / "tokenizer.json").write_text(tokenizer)
        (target / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(), indent=2))
        written.append(target)
    return written


if __name__ == "__main__":
    for path in write_models(Path(sys.argv[1])):
        print(path)
