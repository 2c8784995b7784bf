"""Small parsers shared by every layer: durations and percentile names."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable

from tailbudget.errors import TailbudgetError

PERCENTILES: tuple[str, ...] = ("p50", "p95", "p99")
"""The percentiles a budget speaks of, in order."""

_PCT = re.compile(r"p(\d+(?:\.\d+)?)")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration_s(
    value: str | float | int, *, field: str = "duration", param: str | None = None
) -> float:
    """Parse '2m', '30s', '1500ms', '1h' or a bare number of seconds into seconds.

    `field` names the value in the message (a budget file's path, or an argument);
    `param` is the argument's name when a caller passed it (TailbudgetError.param)."""
    if isinstance(value, bool):
        raise TailbudgetError(
            f"{field}: must be a duration such as 30s or 2m, got {value!r}", param=param
        )
    if isinstance(value, int | float):
        if value < 0:
            raise TailbudgetError(f"{field}: must be a duration >= 0, got {value!r}", param=param)
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise TailbudgetError(
            f"{field}: must be a duration such as 30s, 2m or 1500ms, got {value!r}", param=param
        )
    return float(m.group(1)) * _FACTORS[m.group(2)]


def parse_percentile(name: str, *, where: str = "percentile") -> tuple[str, float]:
    """'p99.9' -> ('p99.9', 0.999): the one reader of percentile names in tailbudget.

    The canonical name drops trailing zeros ('p90.0' -> 'p90'); the quantile is rounded
    to 12 digits, so 'p99.9' is 0.999 wherever it is read (99.9 / 100 is not, in binary).
    """
    m = _PCT.fullmatch(name.strip()) if isinstance(name, str) else None
    value = float(m.group(1)) if m else math.nan
    if not 0.0 < value < 100.0:
        raise TailbudgetError(
            f"{where}: {name!r} is not a percentile; write p and a number in (0, 100), "
            "e.g. p50, p95 or p99.9"
        )
    return f"p{value:g}", round(value / 100.0, 12)


def order_problem(values: Iterable[tuple[str, float]], unit: str = " ms") -> str | None:
    """The one ordering check of percentile values, listed lowest percentile first: None
    when none is below the one before it, else the message naming the pair."""
    for (lo_name, lo), (hi_name, hi) in itertools.pairwise(values):
        if hi < lo:
            return (
                f"{hi_name} ({hi:,.6g}{unit}) is below {lo_name} ({lo:,.6g}{unit}); "
                "a higher percentile must not be lower"
            )
    return None


def quantile_of(name: str) -> float:
    """'p99' -> 0.99, 'p99.9' -> 0.999, 'p50' -> 0.5."""
    return parse_percentile(name)[1]


def min_rows(percentile: str) -> int:
    """Fewest values for a verdict on `percentile`: one beyond it on average (100 for p99).

    The audit's rule; every command that judges a measured figure (plan, rebudget, init,
    simulate) asks this function, so a thin percentile is inconclusive everywhere."""
    q = quantile_of(percentile)
    return math.ceil(1.0 / (1.0 - q) - 1e-9)
