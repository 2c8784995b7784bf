"""The one JSON writer is strict RFC 8259: non-finite figures are null, never NaN/Infinity."""

from __future__ import annotations

import json
import math

import pydantic

from tailbudget._json import dumps


def _strict(text: str) -> object:
    def refuse(const: str) -> object:
        raise ValueError(f"non-RFC 8259 constant {const}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_floats_are_null() -> None:
    text = dumps({"a": math.nan, "b": [1.5, math.inf], "c": {"d": -math.inf}, "e": (2, "x")})
    assert _strict(text) == {"a": None, "b": [1.5, None], "c": {"d": None}, "e": [2, "x"]}
    assert text.endswith("\n")


def test_pydantic_models_are_dumped_in_json_mode() -> None:
    class M(pydantic.BaseModel):
        x: float
        y: list[float]

    assert _strict(dumps(M(x=math.nan, y=[1e308, -math.inf]))) == {"x": None, "y": [1e308, None]}
