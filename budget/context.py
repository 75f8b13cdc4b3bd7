"""The longest context vLLM accepts for a model, derived as vLLM derives it.

Mirrors vllm 0.32 `config/model.py` `_get_and_verify_max_len` and
`transformers_utils/model_arch_config_convertor.py` `derive_max_model_len_and_key`:
the smallest of the length keys in the (text) config, `model_max_length` when the config
has it, capped by the tokenizer's `model_max_length`, times the RoPE scaling factor for
RoPE types whose `max_position_embeddings` is not already scaled.  A `--max-model-len`
above it is refused unless the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from budget.errors import BudgetError

# derive_max_model_len_and_key: possible_keys, smallest wins.
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# _get_and_verify_max_len: RoPE types whose factor is not applied again.
UNSCALED_ROPE_TYPES = (
    "su",
    "longrope",
    "llama3",
    "yarn",
    "deepseek_yarn",
    "deepseek_llama_scaling",
)
# vllm/envs.py: "1" or "true" (any case) lets max_model_len pass the derived limit.
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
DEFAULT_MAX_LEN = 2048  # when no key is in the config (vLLM logs a warning)


@dataclass(frozen=True)
class ContextLimit:
    """The derived limit and the key vLLM names in its refusal."""

    max_model_len: int
    key: str


def _rope_parameters(cfg: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """`rope_parameters` (or legacy `rope_scaling`), one dict per layer type if nested."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not isinstance(params, dict) or not params:
        return
    nested = [p for p in params.values() if isinstance(p, dict)]
    if nested and len(nested) == len(params):
        yield from (p for p in nested if p)
    else:
        yield params


def _scaling_factor(cfg: dict[str, Any]) -> float:
    # _get_and_verify_max_len skips the factor for Gemma 3 ("gemma3" in model_type):
    # its max_position_embeddings already counts the linear scaling.
    if "gemma3" in str(cfg.get("model_type") or ""):
        return 1.0
    factor = 1.0
    for params in _rope_parameters(cfg):
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type not in UNSCALED_ROPE_TYPES:
            factor = params.get("factor", factor)
    return 1.0 if factor is None else float(factor)


def _from_keys(cfg: dict[str, Any]) -> tuple[float, str]:
    derived, key = float("inf"), "max_position_embeddings"
    for name in LENGTH_KEYS:
        value = cfg.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value < derived:
            derived, key = value, name
    if cfg.get("model_max_length"):
        derived, key = cfg["model_max_length"], "model_max_length"
    return derived, key


def context_limit(text_cfg: dict[str, Any], tokenizer_max_length: int | None) -> ContextLimit:
    """The largest max_model_len vLLM accepts without VLLM_ALLOW_LONG_MAX_MODEL_LEN."""
    derived, key = _from_keys(text_cfg)
    if tokenizer_max_length is not None and tokenizer_max_length < derived:
        derived, key = tokenizer_max_length, "tokenizer_config.json model_max_length"
    if derived == float("inf"):
        derived = DEFAULT_MAX_LEN
    return ContextLimit(int(derived * _scaling_factor(text_cfg)), key)


def check_max_model_len(requested: int, limit: ContextLimit, allow_long: bool) -> None:
    """vLLM's refusal of a context above the model's, unless the user allows it."""
    if requested <= limit.max_model_len or allow_long:
        return
    raise BudgetError(
        f"max_model_len={requested} is above the model's derived maximum "
        f"({limit.key}={limit.max_model_len}); vLLM refuses it unless the env var "
        f"{ALLOW_LONG_ENV}=1 is set (then plan with --allow-long-max-model-len), "
        f"or give --max-model-len ≤ {limit.max_model_len}"
    )
