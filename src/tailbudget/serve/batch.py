"""One batch of observations as columns, and what every body reader shares to build it.

`Batch` is the value the JSON, columns and Arrow readers (`ingest`, `columns_body`,
`arrow_body`) return and the runtime ingests; the checks and errors here are shared by
the three readers, so none of them imports another (they formed a cycle before).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.control.columns import StageColumn
from tailbudget.control.stage_windows import MAX_STAGES
from tailbudget.serve.limits import TooLarge

__all__ = [
    "MAX_BATCH",
    "MAX_FUTURE_S",
    "MAX_PAST_S",
    "MAX_STAGE_NAME",
    "BadBatch",
    "Batch",
    "BatchTooLarge",
    "ahead_of_clock",
    "behind_clock",
    "stage_name_problem",
]


MAX_BATCH = 200_000
"""Most observations one request may carry (a 1 MiB body holds far fewer anyway)."""


MAX_FUTURE_S = 300.0
"""How far ahead of the server's clock a `ts` may be; further means a clock or unit bug
(e.g. milliseconds sent as seconds), and one such time would push the rolling
window past every real observation."""


MAX_PAST_S = 7 * 86_400.0
"""How far behind the server's clock a `ts` may be (a week); older means a clock or unit
bug (a year-1 timestamp, seconds since boot), and the rolling windows could never use it."""


MAX_STAGE_NAME = 100
"""Longest stage name (characters); names are metric labels and log records."""


class BadBatch(ValueError):
    """The body is not a valid batch; the message is the one-line reason for the 400."""


class BatchTooLarge(BadBatch, TooLarge):
    """The body declares more than the limits allow (a 413, naming the limit)."""


@dataclass(frozen=True, slots=True)
class Batch:
    """A validated batch as columns."""

    ts: npt.NDArray[np.float64]
    total_ms: npt.NDArray[np.float64]
    error: npt.NDArray[np.bool_]
    stages: dict[str, StageColumn] = field(default_factory=dict)
    """Per stage name: the rows that carry it and its milliseconds."""
    series: dict[str, StageColumn] = field(default_factory=dict)
    """LLM series (ttft, tpot, itl) in the same layout."""
    labels: list[str | None] | None = None
    """Each observation's `class` (None without one); None when no item has one."""

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @property
    def stage_counts(self) -> dict[str, int]:
        """Observations per stage name in the batch."""
        return {name: len(col) for name, col in self.stages.items()}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _ts(value: Any, default: float) -> float | None:
    if value is None:
        return default
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                return None
            return parsed.timestamp()
        except (ValueError, OverflowError, OSError):
            return None
    x = _number(value)
    return x if x is not None and x >= 0 else None


def _short(value: Any) -> str:
    try:
        text = json.dumps(value) if not isinstance(value, str) else repr(value)
    except (RecursionError, ValueError):
        return "a value nested too deep"
    return text if len(text) <= 40 else text[:37] + "..."


def ahead_of_clock(i: int, ahead_s: float) -> BadBatch:
    """The 400 for a `ts` further ahead of the server clock than MAX_FUTURE_S."""
    return BadBatch(
        f"item {i}: ts is {ahead_s:,.0f} s ahead of the server clock; "
        "send epoch seconds (not ms) from a synchronized clock"
    )


def behind_clock(i: int, shown: str, behind_s: float) -> BadBatch:
    """The 400 for a `ts` further behind the server clock than MAX_PAST_S."""
    return BadBatch(
        f"item {i}: ts {shown} is {behind_s / 86_400:,.0f} days before the server clock "
        f"(at most {MAX_PAST_S / 86_400:.0f}); send the time the request finished, "
        "in epoch seconds"
    )


def stage_name_problem(name: str) -> str | None:
    """Why `name` cannot be a stage name (`too_long`, `not_utf8`, `control_character`), or
    None. One check for observations (a 400) and trace spans (folded into `other`):
    names are metric labels and log records. `isprintable` is False for C0 and C1
    controls (NEL included), U+2028/2029 and every other separator but the space."""
    if not name or len(name) > MAX_STAGE_NAME:
        return "too_long" if name else "empty"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "not_utf8"
    return None if name.isprintable() else "control_character"


def _check_stage_name(i: int, name: str, known: int) -> None:
    """A new stage name must be short, non-empty UTF-8, and one of few per batch."""
    problem = stage_name_problem(name)
    if problem in ("too_long", "empty"):
        raise BadBatch(
            f"item {i}: stage name {_short(name)} must be 1 to {MAX_STAGE_NAME} characters"
        )
    if problem == "not_utf8":
        raise BadBatch(f"item {i}: stage name {_short(name)} is not valid UTF-8")
    if problem is not None:
        raise BadBatch(
            f"item {i}: stage name {_short(name)} has a control character (newline, tab, "
            "NEL, U+2028...); stage names are metric labels"
        )
    if known >= MAX_STAGES:
        raise BadBatch(
            f"item {i}: more than {MAX_STAGES} stage names in one batch; "
            "name stages by pipeline step, not per request"
        )
