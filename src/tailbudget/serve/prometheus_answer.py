"""Reading one Prometheus instant-query answer: its shape checked, its figure bounded.

A Prometheus (or a proxy in front of it) can answer with anything: a list, a
string, `data` as a string, a null value, a figure that overflows. Each is an
`AnswerError` naming the field, so the evaluation says why the window is
unknown; nothing of the wrong type travels on into the windows or the journal.
The HTTP side (a total deadline, a size cap) is the source's.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["MAX_ANSWER_BYTES", "MAX_COUNT", "MAX_SECONDS", "AnswerError", "BadFigure", "figure"]

MAX_ANSWER_BYTES = 1024 * 1024
"""Largest answer read (decoded bytes): one instant vector of one series is a few hundred
bytes, so a larger answer is not what the query asks for, and is not buffered whole."""

MAX_SECONDS = 1e9
"""Largest latency quantile taken (seconds, about 32 years): past it a figure is an
overflow or a unit bug, not a measurement, and it would reach the decisions as such."""

MAX_COUNT = 1e15
"""Largest request or error count taken from `increase()`."""


class AnswerError(ValueError):
    """The answer is not an instant-query answer; the message names the field."""

    kind = "bad_answer"


class BadFigure(AnswerError):
    """The answer is well formed but its figure cannot be a latency or a count."""

    kind = "bad_figure"


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _value_of(raw: bytes) -> Any:
    """The `[time, "number"]` pair of the answer's first sample, or None (no sample)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise AnswerError("the answer is not JSON") from None
    if not isinstance(body, dict):
        raise AnswerError(f"the answer is a JSON {_kind(body)}, not an object")
    if body.get("status") != "success":
        said = body.get("error", body.get("status"))
        raise AnswerError(f"prometheus said {str(said)[:200]!r} (status is not 'success')")
    data = body.get("data")
    if not isinstance(data, dict):
        raise AnswerError(f"data is a {_kind(data)}, not an object")
    result = data.get("result")
    if data.get("resultType") == "scalar":
        return result
    if not isinstance(result, list):
        raise AnswerError(f"data.result is a {_kind(result)}, not a list")
    if not result:
        return None
    first = result[0]
    if not isinstance(first, dict):
        raise AnswerError(f"data.result[0] is a {_kind(first)}, not an object")
    if "value" not in first:
        raise AnswerError("data.result[0] has no value (a range query answer?)")
    return first["value"]


def _number(pair: Any) -> float:
    if not isinstance(pair, list) or len(pair) != 2:
        raise AnswerError(f'value must be [time, "number"], got a {_kind(pair)}')
    text = pair[1]
    if not isinstance(text, str):
        raise AnswerError(f"value[1] must be a number in a string, got {_kind(text)}")
    try:
        return float(text[:64])
    except ValueError:
        raise AnswerError(f"value[1] is not a number: {text[:40]!r}") from None


def figure(raw: bytes, field: str) -> float | None:
    """The answer's figure for `field` (a `p95` in seconds or a `count`); None when
    there is no sample or it is NaN (no data in the window, as histogram_quantile
    says it); AnswerError for a malformed answer, BadFigure for an impossible figure."""
    pair = _value_of(raw)
    if pair is None:
        return None
    value = _number(pair)
    if math.isnan(value):
        return None
    count = field == "count" or field.endswith((".count", "errors"))
    top = MAX_COUNT if count else MAX_SECONDS
    if not 0.0 <= value <= top:
        what = "count" if count else "latency (s)"
        raise BadFigure(
            f"{field} = {pair[1][:40]} is not a {what} in [0, {top:g}]; "
            "taken as unknown, never as a figure"
        )
    return value
