"""The one JSON writer every command and report uses: strict RFC 8259.

RFC 8259 has no NaN or Infinity, and strict parsers (jq, Go, JavaScript) reject a
document that holds them. A figure that cannot be computed is written as `null`;
the report that carries it says why in its notes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = "JsonScalar | Sequence[JsonValue] | Mapping[str, JsonValue]"
"""A JSON (or YAML) value as a payload builder writes it: read-only containers, so a
list of objects is a JSON value without a cast."""
JsonObject: TypeAlias = "Mapping[str, JsonValue]"
"""A JSON object whose shape is a payload contract (an export document, a report's JSON)."""
JsonDict: TypeAlias = "dict[str, JsonValue]"
"""A JSON object still being built (its builder adds keys)."""


def finite_or_none(value: Any, nulled: list[str] | None = None, at: str = "") -> Any:
    """The value with every non-finite float (NaN, +/-inf) replaced by None, recursively;
    the path of each one replaced is added to `nulled` when given."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if nulled is not None:
            nulled.append(at or "the value")
        return None
    if isinstance(value, Mapping):
        return {
            k: finite_or_none(v, nulled, f"{at}.{k}" if at else str(k)) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [finite_or_none(v, nulled, f"{at}[{i}]") for i, v in enumerate(value)]
    return value


def _explain(doc: Any, nulled: list[str]) -> None:
    """Say in the document's notes which figures are null because they are not finite."""
    if not nulled or not isinstance(doc, dict):
        return
    shown = ", ".join(nulled[:5]) + (f" and {len(nulled) - 5:,} more" if len(nulled) > 5 else "")
    note = (
        f"{len(nulled):,} figure{'s' if len(nulled) > 1 else ''} could not be computed as a "
        f"finite number (an overflow, or no data) and {'are' if len(nulled) > 1 else 'is'} "
        f"null: {shown}"
    )
    provenance = doc.get("provenance")
    if isinstance(doc.get("notes"), list):
        doc["notes"].append(note)
    elif isinstance(provenance, dict) and isinstance(provenance.get("notes"), list):
        provenance["notes"].append(note)
    else:
        doc["notes"] = [note]


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return value


def dumps(value: Any, *, indent: int | None = 2, explain: bool = False) -> str:
    """Strict JSON text for a JSON-ready value or a pydantic model, newline-terminated.

    Non-finite floats become `null`; `allow_nan=False` guarantees nothing slips through.
    With `explain`, a report (a JSON object) also says in its notes which figures were
    nulled, so a reader knows why they are missing.
    """
    nulled: list[str] = []
    doc = finite_or_none(_plain(value), nulled)
    if explain:
        _explain(doc, nulled)
    return json.dumps(doc, indent=indent, allow_nan=False) + "\n"
