"""The model a check serves: a directory as given, or a profile's config written out.

A budget profile holds a model's config.json values but no weights and no tokenizer.
For a check, its `[config]` table is written as config.json next to the small BPE
tokenizer of entrypoint/gpu_check/tokenizer.py (token ids stay far below any
vocabulary, which is all `--load-format dummy` needs), optionally with fewer layers so
that a large model's shapes fit one GPU in bf16.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from budget.profiles import PROFILE_DIR, model_names
from entrypoint.errors import ConfigError
from entrypoint.gpu_check.tokenizer import write_tokenizer

# Token ids the tiny tokenizer reserves (<|endoftext|>, <|im_start|>, <|im_end|>).
SPECIAL_IDS = {"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 0}


def profile_config(profile: str, num_layers: int | None = None) -> dict[str, Any]:
    """The profile's config.json values; with `num_layers`, that many decoder layers
    (in `text_config` where the profile nests the language model there)."""
    path = PROFILE_DIR / "models" / f"{profile}.toml"
    if not path.is_file():
        names = ", ".join(model_names())
        raise ConfigError(f"--model {profile!r}: no such profile or directory; profiles: {names}")
    with path.open("rb") as handle:
        config: dict[str, Any] = json.loads(json.dumps(tomllib.load(handle)["config"]))
    if num_layers is not None:
        _cut_layers(config.get("text_config", config), num_layers)
    config.update(SPECIAL_IDS)
    return config


def _cut_layers(config: dict[str, Any], num_layers: int) -> None:
    have = int(config["num_hidden_layers"])
    if not 1 <= num_layers <= have:
        raise ConfigError(f"--num-layers {num_layers}: must be 1-{have} (the profile's layers)")
    config["num_hidden_layers"] = num_layers
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:num_layers]


def write_profile_model(profile: str, out_dir: Path, num_layers: int | None = None) -> Path:
    """config.json of `profile` and the small tokenizer, in out_dir; out_dir."""
    config = profile_config(profile, num_layers)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_tokenizer(out_dir)
    return out_dir


def model_dir(model: str, out_dir: Path, num_layers: int | None) -> Path:
    """The directory vLLM loads: `model` when it is one, else the profile written under
    out_dir/model."""
    given = Path(model)
    if given.is_dir():
        if num_layers is not None:
            raise ConfigError("--num-layers applies to a profile name, not to a model directory")
        return given
    return write_profile_model(model, out_dir / "model", num_layers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint.gpu_check.models",
        description="Write a budget profile's config.json and a small tokenizer into OUT_DIR "
        "(a model directory vLLM serves with --load-format dummy).",
    )
    parser.add_argument("profile", help=f"one of: {', '.join(model_names())}")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--num-layers", type=int, metavar="N", help="keep N decoder layers")
    args = parser.parse_args(argv)
    try:
        print(write_profile_model(args.profile, args.out_dir, args.num_layers))
    except ConfigError as exc:
        print(f"sparkserve: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
