"""JSON on the request path: orjson where it gives what the standard library gives.

Every request is parsed once, dumped once and hashed a few times (layout,
divergence, affinity); with the standard library that was the largest share of
the gateway's per-request CPU after I/O (docs/gateway.md, "Overhead").  orjson is
strict where `json` is lenient, so each function falls back to `json` exactly
where they differ, and nothing a client sends is parsed or forwarded differently:

- `json.loads` also accepts `NaN`/`Infinity`, lone UTF-16 surrogate escapes and
  UTF-16/32 input; orjson refuses them, and such a body is parsed by `json` instead
  (`Parsed.exact` is then False);
- orjson reads an integer beyond 64 bits as a float, silently: a body with a run of
  19 or more digits anywhere is parsed by `json` (a run inside a string only costs
  the slower parse);
- such a body is dumped by `json` too (orjson would write `NaN` as `null` and cannot
  write big integers), as is anything nested deeper than orjson writes (254).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

_SORTED = orjson.OPT_SORT_KEYS
# 19 digits reach past the int64 range (9223372036854775807 has 19).
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


@dataclass(frozen=True)
class Parsed:
    value: Any
    exact: bool  # orjson parsed it, so orjson writes it back without loss


def loads(raw: bytes) -> Parsed:
    """Parse like `json.loads`; raises what `json.loads` raises on bad input."""
    if _LONG_DIGITS.search(raw) is None:
        try:
            return Parsed(orjson.loads(raw), True)
        except orjson.JSONDecodeError:
            pass
    return Parsed(json.loads(raw), False)


def dumps(value: Any, exact: bool = True) -> bytes:
    """Compact UTF-8 JSON, as `json.dumps(value, ensure_ascii=False, separators=(",", ":"))`
    (float spelling may differ, e.g. `1e16` for `1e+16`: the same number)."""
    if exact:
        try:
            return orjson.dumps(value)
        except TypeError:  # orjson.JSONEncodeError: too deep, or not JSON-native
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def canonical(value: Any) -> bytes:
    """Bytes that are equal when the values are equal JSON (object keys sorted); for
    hashing only, never sent anywhere."""
    try:
        return orjson.dumps(value, option=_SORTED)
    except TypeError:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8", "surrogatepass")


def loads_or_none(raw: bytes) -> Any:
    """A JSON value from vLLM (usage chunks, bodies), or None when it is not JSON."""
    try:
        return loads(raw).value
    except (ValueError, RecursionError):
        return None
