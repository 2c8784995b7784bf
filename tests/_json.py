"""Strict JSON (RFC 8259) for tests of what a writer or server puts out."""

from __future__ import annotations

import json
from typing import Any


def strict_json(text: str) -> Any:
    """`text` parsed as RFC 8259 JSON: a bare NaN or Infinity fails the test."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in what should be strict JSON")

    return json.loads(text, parse_constant=refuse)
