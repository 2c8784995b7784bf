"""Fields of parsed trace JSON (OTLP, Jaeger), read leniently: a field of the wrong type
reads as missing, and the span that lacks it is then rejected with a reason or given a
default. A file is read to its end; the live receiver (`serve.traces.otlp_json`) checks
types instead, since an exporter must hear what it sent wrong."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["attribute", "get", "int_or_none", "items", "parse", "text"]


def parse(data: bytes) -> Any:
    """The JSON value in `data`, or None when it is not one (bad syntax, not UTF-8 text)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def attribute(holder: Any, key: str) -> str | None:
    """An OTLP attribute's value as text (its one typed field: stringValue, intValue...)."""
    for attr in items(holder, "attributes"):
        if isinstance(attr, dict) and attr.get("key") == key:
            value = attr.get("value")
            if isinstance(value, dict):
                for v in value.values():
                    return text(v)
            return text(value)
    return None


def get(obj: Any, *keys: str) -> Any:
    """The first of `keys` an object holds (camelCase or snake_case), else None."""
    if not isinstance(obj, dict):
        return None
    for key in keys:
        if key in obj:
            return obj[key]
    return None


def items(obj: Any, *keys: str) -> list[Any]:
    """A list field (`get`), or none when it is missing or not a list."""
    value = get(obj, *keys)
    return value if isinstance(value, list) else []


def text(value: Any) -> str | None:
    """A scalar as stripped text; None for none, an object, a list or blank text."""
    if value is None or isinstance(value, dict | list):
        return None
    out = str(value).strip()
    return out or None


def int_or_none(value: Any) -> int | None:
    """An integer (nanoseconds, microseconds) from a JSON number or decimal string; None
    for anything else and past +-2**62 (a time the engine could not take)."""
    if isinstance(value, bool):
        return None
    try:
        number = int(value) if isinstance(value, int | str) else int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return number if -(2**62) < number < 2**62 else None
