"""Small parsers shared by every layer: durations and percentile names."""

from __future__ import annotations

import re

from tailbudget.errors import TailbudgetError

PERCENTILES: tuple[str, ...] = ("p50", "p95", "p99")
"""The percentiles a budget speaks of, in order."""

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


def quantile_of(name: str) -> float:
    """'p99' -> 0.99, 'p99.9' -> 0.999, 'p50' -> 0.5."""
    m = re.fullmatch(r"p(\d{1,2}(?:\.\d+)?)", name.strip())
    if not m:
        raise TailbudgetError(f"percentile must look like p50, p95 or p99.9, got {name!r}")
    q = float(m.group(1)) / 100.0
    if not 0.0 < q < 1.0:
        raise TailbudgetError(f"percentile must be between p0 and p100 exclusive, got {name!r}")
    return q
