"""The one formatter for figures people read: ms, shares, counts, ratios and thresholds.

Every renderer (markdown, HTML, text, the demo's summary) and every decision reason
goes through these functions, so a figure reads the same wherever it appears. The
module imports nothing from tailbudget, so any layer may use it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Concatenate, ParamSpec

MISSING = "n/a"
"""What a missing or non-finite figure prints as."""


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


P = ParamSpec("P")


def _figure(render: Callable[Concatenate[float, P], str]) -> Callable[Concatenate[object, P], str]:
    """A formatter of any value: a finite number goes to `render`, anything else is MISSING."""

    @functools.wraps(render)
    def figure(value: object, /, *args: P.args, **kwargs: P.kwargs) -> str:
        v = _num(value)
        return MISSING if v is None else render(v, *args, **kwargs)

    return figure


@_figure
def ms(v: float) -> str:
    """Milliseconds: '1,234' (whole ms from 10 up), '4.5' below 10; 'n/a' when missing."""
    if v == 0:
        return "0"
    if abs(v) >= 1e15:  # past 31,000 years: a unit or data error, shown short
        return f"{v:.3g}"
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:,.1f}"


@_figure
def signed_ms(v: float) -> str:
    """A change in milliseconds with its sign: '+2,115', '-0.4'."""
    text = ms(abs(v))
    return ("-" if v < 0 and text.strip("0.,") else "+") + text


@_figure
def share(v: float, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage: '12.3%'; 'n/a' when missing."""
    return f"{v * 100:.{digits}f}%"


@_figure
def signed_share(v: float, digits: int = 1) -> str:
    """A change of a share with its sign, in percentage points of [0, 1]: '+1.2%', '-0.4%'."""
    return f"{v * 100:+.{digits}f}%"


@_figure
def count(v: float) -> str:
    """A whole count with thousands separators: '12,000'."""
    return f"{v:,.0f}"


def counted(n: float, noun: str, plural: str | None = None) -> str:
    """A count with its noun, singular at one: '1 minute', '12,000 requests'."""
    text = count(n)
    return f"{text} {noun if text == '1' else plural or noun + 's'}"


@_figure
def number(v: float) -> str:
    """Any other figure (R², a slope, a score) to four significant digits: '13.84'."""
    if v != 0 and abs(v) < 1e-3:
        return f"{v:.3g}"
    return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"


@_figure
def r2(v: float) -> str:
    """A coefficient of determination (or any score in [0, 1]) to two decimals: '0.59'."""
    return f"{v:.2f}"


@_figure
def seconds(v: float) -> str:
    """A duration in seconds: '60 s', '9.8 s', '14,400 s'."""
    return f"{v:,.0f} s" if abs(v) >= 100 else f"{v:.3g} s"


def listing(value: object) -> str:
    """A figure, a text or a list of them as people read it: numbers to four significant
    digits ('9.352, 43.98'), pairs in parentheses ('(9.352, 43.98), (48.98, 57.58)')."""
    if isinstance(value, list | tuple):
        items = [f"({listing(v)})" if isinstance(v, list | tuple) else listing(v) for v in value]
        return ", ".join(items) if items else "none"
    if value is None or isinstance(value, str):
        return MISSING if value is None else value
    v = _num(value)
    return MISSING if v is None else number(v + 0.0)  # + 0.0: -0.0 reads 0


def threshold(metric: str, value: object) -> str:
    """A metric's value or threshold in its own unit: '1,800 ms', '0.5%', '1.2x'.

    Latency percentiles (p50, p95, p99.9, ttft.p95, retrieval.p99) are ms; error rates
    and goodput are shares, with enough digits to tell 0.5% from 1%; a `_vs_`
    metric (p99_vs_baseline) is a ratio.
    """
    v = _num(value)
    if v is None:
        return "n/a"
    if "_vs_" in metric:
        return f"{v:.3g}x"
    if metric in ("error_rate", "goodput", "utilization") or metric.endswith(".error_rate"):
        return f"{100 * v:.3g}%"
    if metric in _COUNTS:  # requests at once, replicas: counts, never ms
        unit = _COUNTS[metric]
        return f"{v:,.3g} {unit.removesuffix('s') if v == 1 else unit}"
    if metric in ("arrival_rate", "rps"):
        return f"{v:,.3g}/s"
    return f"{v:,.0f} ms" if abs(v) >= 100 else f"{v:.3g} ms"


_COUNTS = {"concurrency": "requests", "in_flight": "requests", "replicas": "replicas"}
"""Metrics a policy may watch that count things, with the unit they count."""


__all__ = [
    "MISSING",
    "count",
    "counted",
    "listing",
    "ms",
    "number",
    "r2",
    "seconds",
    "share",
    "signed_ms",
    "signed_share",
    "threshold",
]
