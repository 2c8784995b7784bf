"""Tick labels a person reads without decoding: plain numbers and named percentiles.

Matplotlib's defaults label a log axis `3x10^2` and a logit axis `1-10^-4`, and
a narrow log axis may get a single labelled tick. `tidy` runs on every chart
before it is written: log axes get 1-2-5 ticks in plain numbers with thousands
separators, logit axes get p50/p90/p99/p99.9, linear axes at least four ticks,
and an axis marked with `integer_axis` (replicas, requests) whole numbers only.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.ticker import (
    FixedFormatter,
    FixedLocator,
    FuncFormatter,
    LogFormatter,
    LogitFormatter,
    MaxNLocator,
    NullFormatter,
    ScalarFormatter,
)

from tailbudget._units import percentile_name

__all__ = ["MIN_TICKS", "integer_axis", "percentile_label", "plain_number", "tidy"]

MIN_TICKS = 4
"""Fewest labelled ticks on a numeric axis."""
_MAX_TICKS = 9
_INTEGER = "_tailbudget_integer"
_QUANTILES = (0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999)
_MORE_QUANTILES = (0.05, 0.25, 0.75, 0.95, 0.995, 0.9995)
_LOG_STEPS: tuple[tuple[float, ...], ...] = (
    (1.0,),
    (1.0, 3.0),
    (1.0, 2.0, 5.0),
    (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
    (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0),
)


def plain_number(value: float, step: float = 1.0) -> str:
    """`12,500`, `2.5`, `0.25`: as many decimals as the tick spacing needs, no exponent."""
    decimals = 0 if step >= 1 or step <= 0 else min(6, math.ceil(-math.log10(step) - 1e-9))
    if decimals == 0 and value != round(value) and abs(value) < 10:
        decimals = 1
    text = f"{value:,.{decimals}f}"
    return "0" if text.strip("-0.,") == "" else text


def percentile_label(q: float) -> str:
    """0.99 -> `p99`, 0.999 -> `p99.9`, 0.5 -> `p50` (the one spelling, `Percentile.name`)."""
    return percentile_name(q)


def integer_axis(axis: Axis) -> None:
    """Mark an axis that counts things (replicas): whole-number ticks only."""
    setattr(axis, _INTEGER, True)


def tidy(fig: Figure) -> None:
    """Plain, readable ticks on every numeric axis of the figure (call before saving)."""
    for ax in fig.axes:
        for axis, limits, setter in (
            (ax.xaxis, ax.get_xlim, ax.set_xlim),
            (ax.yaxis, ax.get_ylim, ax.set_ylim),
        ):
            if _is_category(axis):
                continue
            lo, hi = sorted(float(v) for v in limits())
            scale = axis.get_scale()
            if scale == "log":
                _log(axis, lo, hi)
            elif scale == "logit":
                _logit(axis, lo, hi)
            elif scale == "linear":
                _linear(axis, lo, hi, setter)


def _is_category(axis: Axis) -> bool:
    """Stage names, cohort values or dates: labels that are not numbers to tidy."""
    fmt = axis.get_major_formatter()
    if isinstance(fmt, FixedFormatter):
        return True
    # `set_ticks(pos, names)` installs a FuncFormatter over a {position: name} dict on
    # matplotlib >= 3.8 (a FixedFormatter before): re-spacing those ticks dropped every
    # other stage name at 7 stages (E-Shopper's top culprit's bar had no label).
    func = getattr(fmt, "func", None)
    if isinstance(func, functools.partial) and func.func is getattr(
        Axis, "_format_with_dict", None
    ):
        return True
    return type(fmt).__module__.startswith(("matplotlib.dates", "matplotlib.category"))


def _log(axis: Axis, lo: float, hi: float) -> None:
    lo = max(lo, 1e-12)
    ticks: list[float] = []
    for steps in _LOG_STEPS:
        ticks = _log_ticks(lo, hi, steps)
        if len(ticks) >= MIN_TICKS:
            break
    if len(ticks) > _MAX_TICKS:
        ticks = ticks[:: math.ceil(len(ticks) / _MAX_TICKS)]
    if len(ticks) < MIN_TICKS:  # a very narrow range: evenly spaced plain values
        ticks = [float(v) for v in MaxNLocator(6, min_n_ticks=MIN_TICKS).tick_values(lo, hi)]
        ticks = [t for t in ticks if lo <= t <= hi and t > 0]
    _fixed(axis, ticks, _step(ticks))
    axis.set_minor_formatter(NullFormatter())


def _log_ticks(lo: float, hi: float, steps: Sequence[float]) -> list[float]:
    out: list[float] = []
    for decade in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for s in steps:
            v = s * 10.0**decade
            if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9):
                out.append(v)
    return out


def _logit(axis: Axis, lo: float, hi: float) -> None:
    ticks = [q for q in _QUANTILES if lo <= q <= hi]
    if len(ticks) < MIN_TICKS:
        ticks = sorted({*ticks, *(q for q in _MORE_QUANTILES if lo <= q <= hi)})
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: percentile_label(v)))
    axis.set_minor_formatter(NullFormatter())


def _linear(axis: Axis, lo: float, hi: float, setter: Any) -> None:
    integer = bool(getattr(axis, _INTEGER, False))
    if integer and hi - lo < MIN_TICKS - 1:
        # Four whole numbers need a span of three: widen the view rather than show 0.25s.
        hi = lo + MIN_TICKS - 1
        setter(lo, hi)
    fmt = axis.get_major_formatter()
    plain = isinstance(fmt, ScalarFormatter | LogFormatter | LogitFormatter)
    locator = MaxNLocator(nbins=6, integer=integer, min_n_ticks=MIN_TICKS, steps=[1, 2, 2.5, 5, 10])
    ticks = [float(t) for t in locator.tick_values(lo, hi) if lo - 1e-9 <= t <= hi + 1e-9]
    if len(ticks) < MIN_TICKS and not integer:
        ticks = [lo + (hi - lo) * i / (MIN_TICKS - 1) for i in range(MIN_TICKS)]
    if plain or integer:
        _fixed(axis, ticks, _step(ticks))
    else:  # a chart's own plain formatter (ms, %) keeps its words; only the count changes
        axis.set_major_locator(FixedLocator(ticks))


def _fixed(axis: Axis, ticks: Sequence[float], step: float) -> None:
    axis.set_major_locator(FixedLocator(list(ticks)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: plain_number(v, step)))


def _step(ticks: Sequence[float]) -> float:
    """The finest spacing that tells neighbouring ticks apart."""
    if len(ticks) < 2:
        return 1.0
    gaps = [b - a for a, b in itertools.pairwise(ticks) if b > a]
    smallest = min(gaps, default=1.0)
    # A log axis's 1.5 or 2.5 needs one decimal even where the gap is wider.
    fractional = [t for t in ticks if t != round(t) and abs(t) < 100]
    finest = min((abs(t - round(t)) for t in fractional), default=smallest)
    return min(smallest, finest) if finest > 0 else smallest
