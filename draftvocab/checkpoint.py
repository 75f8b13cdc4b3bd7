"""The checkpoint side: find the target's lm_head and the MTP module in SRC_DIR's
safetensors, and write DST_DIR — the drafter's head and its draft→target map in a shard of
their own, an index naming it, config.json with `draft_vocab_size`, and every other file
of SRC_DIR linked (never copied, never altered)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget.safetensors_headers import TensorHeader
from draftvocab import safetensors_file
from draftvocab.errors import DraftVocabError

INDEX = "model.safetensors.index.json"
SHARD = "draft-vocab.safetensors"
# Names of the new tensors: under `mtp.` so the target model's loader skips them (vLLM's
# Qwen3-Next / Qwen3.5 loaders drop `mtp.` weights), read by the plugin's drafter.
HEAD = "mtp.draft_lm_head.weight"
# EAGLE-3's convention (vllm/model_executor/models/llama_eagle3.py `d2t`): target id of
# draft id i = i + d2t[i].
D2T = "mtp.draft_lm_head.d2t"
D2T_DTYPE = "I64"
MTP_PREFIX = "mtp."


@dataclass(frozen=True)
class Source:
    directory: Path
    config: dict[str, Any]
    weight_map: dict[str, str]  # tensor name → shard file name
    lm_head_name: str
    lm_head: TensorHeader

    @property
    def vocab_size(self) -> int:
        return self.lm_head.shape[0]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise DraftVocabError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DraftVocabError(f"{path}: cannot read it ({exc})") from None
    if not isinstance(value, dict):
        raise DraftVocabError(f"{path}: must hold a JSON object")
    return value


def _weight_map(directory: Path) -> dict[str, str]:
    index = directory / INDEX
    if index.exists():
        mapping = _read_json(index).get("weight_map")
        if not isinstance(mapping, dict) or not mapping:
            raise DraftVocabError(f"{index}: no weight_map")
        missing = sorted({f for f in mapping.values() if not (directory / f).is_file()})
        if missing:
            raise DraftVocabError(f"{index} names {missing[0]}, which is not in {directory}")
        return {str(name): str(file) for name, file in mapping.items()}
    shards = sorted(directory.glob("*.safetensors"))
    if len(shards) != 1:
        found = "none" if not shards else f"{len(shards)} files and no {INDEX}"
        raise DraftVocabError(f"{directory}: needs one *.safetensors file or {INDEX} ({found})")
    return dict.fromkeys(safetensors_file.read_header(shards[0]), shards[0].name)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: `text_config` in a multimodal checkpoint's config.json
    (Qwen3.5's `Qwen3_5ForConditionalGeneration`), else the config itself."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def config_value(config: dict[str, Any], key: str) -> Any:
    """`key` from the text config, else from the top level (a multimodal config may say
    either: Qwen3.5 keeps its token ids in `text_config` only)."""
    text = _text_config(config)
    return text[key] if key in text else config.get(key)


def read_source(directory: Path) -> Source:
    """SRC_DIR's config and weights, checked: an MTP module, an lm_head of its own."""
    config = _read_json(directory / "config.json")
    if any(c.get("tie_word_embeddings") for c in (config, _text_config(config))):
        raise DraftVocabError(
            f"{directory}: tie_word_embeddings is true; the drafter's head would be the input "
            "embedding, which a reduced head cannot replace"
        )
    weights = _weight_map(directory)
    if not any(name.startswith(MTP_PREFIX) for name in weights):
        raise DraftVocabError(f"{directory}: the checkpoint has no MTP module (no mtp.* weights)")
    heads = [n for n in weights if n.endswith("lm_head.weight") and not n.startswith(MTP_PREFIX)]
    if len(heads) != 1:
        raise DraftVocabError(f"{directory}: expected one lm_head.weight, found {heads or 'none'}")
    (name,) = heads
    info = safetensors_file.read_header(directory / weights[name]).get(name)
    if info is None or len(info.shape) != 2:
        raise DraftVocabError(f"{directory / weights[name]}: no 2-D tensor {name}")
    return Source(directory, config, weights, name, info)


def _link_everything_but(source: Path, out: Path, skip: set[str]) -> None:
    for entry in sorted(source.iterdir()):
        if entry.name not in skip:
            os.symlink(entry.resolve(), out / entry.name)


def check_out(source: Path, out: Path) -> None:
    """DST_DIR must be new (or empty), and not SRC_DIR."""
    if out.resolve() == source.resolve():
        raise DraftVocabError("--out must not be SRC_DIR: the source is never altered")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DraftVocabError(f"--out {out} exists and is not empty; give a new directory")


def write_output(source: Source, out: Path, rows: tuple[int, ...]) -> int:
    """Write DST_DIR (checked by `check_out`); the bytes the new shard adds."""
    out.mkdir(parents=True, exist_ok=True)
    head = safetensors_file.read_rows(
        source.directory / source.weight_map[source.lm_head_name], source.lm_head, rows
    )
    d2t = b"".join((target - i).to_bytes(8, "little", signed=True) for i, target in enumerate(rows))
    added = safetensors_file.write(
        out / SHARD,
        {
            HEAD: (source.lm_head.dtype, (len(rows), *source.lm_head.shape[1:]), head),
            D2T: (D2T_DTYPE, (len(rows),), d2t),
        },
    )
    _link_everything_but(source.directory, out, {"config.json", INDEX})
    weight_map = {**source.weight_map, HEAD: SHARD, D2T: SHARD}
    (out / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    config = json.loads(json.dumps(source.config))
    _text_config(config)["draft_vocab_size"] = len(rows)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return added
