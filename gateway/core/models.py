"""Model names and the choice of a request's model, for the standalone gateway's
several models (GATEWAY_MODELS) and for API keys limited to some models.

A model name is what clients send in `model` (vLLM's `--served-model-name`, e.g.
`Qwen/Qwen2.5-0.5B-Instruct`); it holds none of `= , ; : | @` or spaces, which
GATEWAY_MODELS and the key syntax (`tenant@model|model:key`) use as separators.
A model a key may not use and a model that is not served get the same answer, so a
key cannot learn which other models exist.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from gateway.core.errors import ModelNotFound

MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$")


def requested_model(body: Mapping[str, Any]) -> str | None:
    """The request's `model` when it is a string (vLLM answers other values itself)."""
    model = body.get("model")
    return model if isinstance(model, str) else None


def not_found(model: str | None, known: Collection[str]) -> ModelNotFound:
    listed = ", ".join(sorted(known)) or "none"
    if model is None:
        return ModelNotFound(f"Parameter 'model' is required here; the models: {listed}.")
    return ModelNotFound(
        f"The model '{model}' does not exist or you do not have access to it; the models: {listed}."
    )


def check_allowed(model: str | None, allowed: frozenset[str] | None) -> None:
    """A key limited to `allowed` models (None: any) may ask only for one of them."""
    if allowed is not None and model not in allowed:
        raise not_found(model, allowed)


def choose(model: str | None, served: Collection[str], allowed: frozenset[str] | None) -> str:
    """The served model a request goes to: its `model`, or the only one served when it
    names none; `ModelNotFound` listing what the key may use.  (A key limited to
    models was already refused a request naming none, by `check_allowed`.)"""
    usable = [name for name in served if allowed is None or name in allowed]
    if model is None and len(usable) == 1:
        return usable[0]
    if model is None or model not in usable:
        raise not_found(model, usable)
    return model
