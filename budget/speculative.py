"""`--speculative-config` in vLLM's own spelling, and `--mtp K` as its shorthand.

Mirrors vllm 0.32 `config/speculative.py` (`SpeculativeConfig.__post_init__`): the
`*_mtp` method names are deprecated aliases of `mtp`; without a method, a `model`
means `draft_model`; EAGLE, EAGLE-3, DFlash and draft models need a `model` (a
directory here: the planner reads its config.json and safetensors headers); n-gram and
suffix decoding have no drafter weights and no KV layers of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from budget.errors import BudgetError

# config/speculative.py MTPModelTypes (0.32): all replaced by "mtp".
MTP_ALIASES = (
    "deepseek_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
    "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "qwen3_next_mtp", "qwen3_5_mtp",
    "longcat_flash_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "gemma4_mtp",
)  # fmt: skip
DRAFTER_METHODS = ("eagle", "eagle3", "dflash", "draft_model")  # a `model` with weights + KV
MODEL_FREE_METHODS = ("ngram", "suffix")  # proposers without weights or KV
METHODS = ("mtp", *DRAFTER_METHODS, *MODEL_FREE_METHODS)
MAX_SPECULATIVE_TOKENS = 16


@dataclass(frozen=True)
class Speculation:
    """The speculative decoding a plan is for."""

    method: str  # one of METHODS
    num_speculative_tokens: int
    model: str | None  # the drafter's directory (DRAFTER_METHODS)
    vllm_config: dict[str, Any]  # what `--speculative-config` passes to vLLM

    @property
    def has_drafter(self) -> bool:
        return self.method in DRAFTER_METHODS

    def to_json(self) -> str:
        return json.dumps(self.vllm_config, separators=(",", ":"))


def parse_config(raw: str) -> dict[str, Any]:
    """The option's parser: a JSON object (ValueError says what is allowed)."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise ValueError(
            'must be a JSON object in vLLM\'s spelling, e.g. {"method":"eagle","model":"DIR",'
            '"num_speculative_tokens":3}'
        ) from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object, not " + type(value).__name__)
    return value


def _method(config: dict[str, Any]) -> str:
    method = config.get("method")
    if method is None:
        return "draft_model" if config.get("model") not in (None, "ngram", "[ngram]") else "ngram"
    name = str(method)
    if name in MTP_ALIASES:
        return "mtp"
    if name == "[ngram]":
        return "ngram"
    if name not in METHODS:
        raise BudgetError(
            f"speculative_config method={name!r}; the planner knows {', '.join(METHODS)} "
            f"(and the *_mtp aliases of mtp)"
        )
    return name


def _tokens(config: dict[str, Any]) -> int:
    k = config.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
        raise BudgetError(
            f"speculative_config num_speculative_tokens={k!r}; must be an integer "
            f"from 1 to {MAX_SPECULATIVE_TOKENS}"
        )
    return k


def from_config(config: dict[str, Any]) -> Speculation:
    method = _method(config)
    k = _tokens(config)
    model = config.get("model")
    if method in DRAFTER_METHODS and not isinstance(model, str):
        raise BudgetError(
            f"speculative_config method={method!r} needs 'model': the drafter's directory"
        )
    return Speculation(method, k, model if method in DRAFTER_METHODS else None, dict(config))


def mtp_shorthand(k: int) -> Speculation:
    """`--mtp K`: vLLM's `{"method":"mtp","num_speculative_tokens":K}`."""
    return Speculation("mtp", k, None, {"method": "mtp", "num_speculative_tokens": k})


def resolve_speculation(mtp: int | None, config: dict[str, Any] | None) -> Speculation | None:
    """The speculation asked for; `--mtp K` and a config that says otherwise → error."""
    if config is None:
        return mtp_shorthand(mtp) if mtp else None
    spec = from_config(config)
    if mtp is not None and (mtp == 0 or spec.method != "mtp" or spec.num_speculative_tokens != mtp):
        raise BudgetError(
            f"mtp={mtp} and speculative_config {spec.to_json()} disagree; "
            f'give one (--mtp K is {{"method":"mtp","num_speculative_tokens":K}})'
        )
    return spec
