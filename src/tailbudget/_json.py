"""The one JSON writer every command and report uses: strict RFC 8259.

RFC 8259 has no NaN or Infinity, and strict parsers (jq, Go, JavaScript) reject a
document that holds them. A figure that cannot be computed is written as `null`;
the report that carries it says why in its notes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def finite_or_none(value: Any) -> Any:
    """The value with every non-finite float (NaN, +/-inf) replaced by None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return value


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """Strict JSON text for a JSON-ready value or a pydantic model, newline-terminated.

    Non-finite floats become `null`; `allow_nan=False` guarantees nothing slips through.
    """
    text = json.dumps(finite_or_none(_plain(value)), indent=indent, allow_nan=False)
    return text + "\n"
