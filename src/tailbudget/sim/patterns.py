"""Generated arrival patterns for judging scaling policies on a suite, not on one trace.

Each pattern is a rate over time (requests/s as a multiple of a base rate),
sampled as a non-homogeneous Poisson process (thinning): a step, a doubling,
a diurnal ramp, on/off, a spike and a slow drift, and a steady rate. Requests copy
random rows of the model's samples (their prompt and answer tokens), so a pattern
carries the fitted service's own request mix. `rescaled_arrivals` gives a real
trace's arrival shape (its inter-arrival gaps, in order, repeated to fill the span)
at a stated mean rate: real, steady-ish traffic rather than a generated rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tailbudget.errors import TailbudgetError
from tailbudget.sim.trace import Arrivals

__all__ = ["PATTERNS", "pattern_arrivals", "rescaled_arrivals"]

Shape = Callable[[np.ndarray, float], np.ndarray]
"""(times s, span s) -> the rate at those times as a multiple of the base rate."""


def _step(t: np.ndarray, span: float) -> np.ndarray:
    return np.where(t < span / 3, 1.0, 3.0)


def _doubling(t: np.ndarray, span: float) -> np.ndarray:
    return np.where((t >= span / 3) & (t < 2 * span / 3), 2.0, 1.0)


def _diurnal(t: np.ndarray, span: float) -> np.ndarray:
    return 1.0 + 2.0 * np.sin(np.pi * t / span) ** 2


def _on_off(t: np.ndarray, span: float) -> np.ndarray:
    return np.where((t // 300.0) % 2 == 1, 3.0, 0.2)


def _spike(t: np.ndarray, span: float) -> np.ndarray:
    minute = t // 60.0
    return np.where((minute == 12) | (minute == 22), 5.0, 1.0)


def _drift(t: np.ndarray, span: float) -> np.ndarray:
    return 1.0 + 2.0 * t / span


def _steady(t: np.ndarray, span: float) -> np.ndarray:
    return np.ones_like(t)


PATTERNS: dict[str, Shape] = {
    "step": _step,
    "doubling": _doubling,
    "diurnal": _diurnal,
    "on/off": _on_off,
    "spike": _spike,
    "drift": _drift,
    "steady": _steady,
}
"""step: x1 then x3 from a third in; doubling: x2 over the middle third; diurnal: x1 to x3
and back (sin^2); on/off: 5 min at x0.2, 5 min at x3, repeated; spike: x5 for minutes 12
and 22; drift: x1 to x3, linear; steady: x1 throughout (plain Poisson)."""


def pattern_arrivals(
    name: str, base_rate: float, span_s: float, pool: int, seed: int = 0
) -> Arrivals:
    """Poisson arrivals with the pattern's rate times `base_rate` over `span_s`, each copying
    one of `pool` sample rows."""
    shape = PATTERNS.get(name)
    if shape is None:
        raise TailbudgetError(
            f"pattern {name!r} is not one of {', '.join(PATTERNS)}", param="pattern"
        )
    if not (base_rate > 0 and math.isfinite(base_rate) and span_s > 0 and pool >= 1):
        raise TailbudgetError(
            f"pattern {name!r}: base rate and span must be positive, got {base_rate!r} and "
            f"{span_s!r}",
            param="pattern",
        )
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.0, span_s, 10_001)
    top = float(shape(grid, span_s).max()) * base_rate
    n = rng.poisson(top * span_s)
    t = np.sort(rng.uniform(0.0, span_s, size=n))
    keep = rng.random(n) * top < shape(t, span_s) * base_rate
    t = t[keep]
    return Arrivals(
        t_s=t,
        src=rng.integers(0, pool, size=t.size).astype(np.int64),
        low_priority=np.zeros(t.size, dtype=bool),
        description=f"pattern {name} at {base_rate:g}/s base, {span_s / 60:g} min",
    )


def rescaled_arrivals(
    times_s: np.ndarray, rate: float, span_s: float, pool: int, seed: int = 0, name: str = "trace"
) -> Arrivals:
    """A real trace's arrival shape at mean `rate` requests/s over `span_s`: its gaps in
    order, scaled so their mean is 1/rate, repeated end to end until the span is full;
    each request copies one of `pool` sample rows (seeded)."""
    t = np.sort(np.asarray(times_s, dtype=np.float64))
    gaps = np.diff(t)
    if gaps.size == 0 or not float(gaps.sum()) > 0:
        raise TailbudgetError(
            f"{name}: needs at least two distinct arrival times to rescale", param="pattern"
        )
    if not (rate > 0 and math.isfinite(rate) and span_s > 0 and pool >= 1):
        raise TailbudgetError(
            f"{name}: rate and span must be positive, got {rate!r} and {span_s!r}",
            param="pattern",
        )
    gaps = gaps * (1.0 / rate) / float(gaps.mean())
    reps = math.ceil(span_s * rate / gaps.size) + 1
    out = np.cumsum(np.tile(gaps, reps))
    out = out[out < span_s]
    rng = np.random.default_rng(seed)
    return Arrivals(
        t_s=out,
        src=rng.integers(0, pool, size=out.size).astype(np.int64),
        low_priority=np.zeros(out.size, dtype=bool),
        description=f"{name} gaps rescaled to {rate:g}/s, {span_s / 60:g} min",
    )
