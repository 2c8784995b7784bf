"""Arrival processes: the log's own times, a CSV trace, `poisson:RATE` or `burst:N`.

A load multiple L scales the offered rate: Poisson and burst multiply rate or count;
recorded times (the log's, a trace's) are compressed by L (bursts keep their
shape, only closer together) and repeated to fill the duration.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tailbudget.errors import TailbudgetError
from tailbudget.sim.trace import Arrivals

__all__ = ["ArrivalSpec", "TraceTimes", "make_arrivals", "parse_arrivals", "read_trace"]

_TIME = ("timestamp", "ts", "time", "t", "arrival", "arrival_time")
_IN = ("contexttokens", "input_tokens", "prompt_tokens", "input_len", "context_tokens")
_OUT = ("generatedtokens", "output_tokens", "completion_tokens", "output_len")


@dataclass(frozen=True)
class TraceTimes:
    """Recorded arrival times (s from the first) and, when the trace has them, token counts."""

    t_s: npt.NDArray[np.float64]
    input_tokens: npt.NDArray[np.float64] | None = None
    output_tokens: npt.NDArray[np.float64] | None = None
    source: str = ""


@dataclass(frozen=True)
class ArrivalSpec:
    """A parsed arrivals value (poisson:RATE, burst:N or a CSV trace)."""

    kind: str
    """log | trace | poisson | burst"""
    rate: float = 0.0
    count: int = 0
    trace: TraceTimes | None = None

    @property
    def label(self) -> str:
        """How reports name it."""
        if self.kind == "poisson":
            return f"poisson:{self.rate:g}"
        if self.kind == "burst":
            return f"burst:{self.count}"
        if self.kind == "trace" and self.trace is not None:
            return f"trace {self.trace.source}"
        return "the log's own arrival times"


def _time_s(text: str, where: str = "") -> float:
    try:
        value = float(text)
    except ValueError:
        try:
            stamp = np.datetime64(text.strip().replace("Z", ""), "us")
        except ValueError:
            raise TailbudgetError(
                f"{where}arrival time {text!r} is neither ISO-8601 nor epoch seconds"
            ) from None
        value = math.nan if np.isnat(stamp) else float(stamp.astype(np.int64)) / 1e6
    if not (math.isfinite(value) and value >= 0):
        raise TailbudgetError(
            f"{where}arrival time {text!r} must be a finite time at or after 1970 (epoch seconds, "
            "or seconds from the start)"
        )
    return value


def read_trace(path: str) -> TraceTimes:
    """A CSV of arrival times (first matching column), with token counts when present."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise TailbudgetError(f"{path}: cannot read arrival trace ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise TailbudgetError(
            f"{path}: the arrival trace is not UTF-8 text (byte {exc.start}); give a CSV "
            "with a time column"
        ) from None
    except csv.Error as exc:
        raise TailbudgetError(f"{path}: not a readable CSV arrival trace ({exc})") from None
    if not rows:
        raise TailbudgetError(f"{path}: the arrival trace has no rows")
    cols = {k.strip().lower(): k for k in rows[0] if k}
    tcol = next((cols[c] for c in _TIME if c in cols), None)
    if tcol is None:
        raise TailbudgetError(f"{path}: no arrival time column; name one of {', '.join(_TIME)}")
    t = np.sort(
        np.asarray(
            [_time_s(r[tcol] or "", f"{path}, line {i + 2}: ") for i, r in enumerate(rows)],
            dtype=np.float64,
        )
    )

    def tokens(names: tuple[str, ...]) -> npt.NDArray[np.float64] | None:
        col = next((cols[c] for c in names if c in cols), None)
        if col is None:
            return None
        try:
            return np.asarray([float(r[col]) for r in rows], dtype=np.float64)
        except (TypeError, ValueError):
            raise TailbudgetError(f"{path}: column {col!r} must hold token counts") from None

    return TraceTimes(t - t[0], tokens(_IN), tokens(_OUT), path)


def parse_arrivals(text: str | None) -> ArrivalSpec:
    """None (the log's times), 'poisson:RATE', 'burst:N' or a CSV path."""
    if text is None:
        return ArrivalSpec("log")
    kind, sep, arg = text.partition(":")
    if sep and kind in ("poisson", "burst"):
        try:
            value = float(arg)
        except ValueError:
            value = math.nan
        if kind == "poisson" and value > 0 and math.isfinite(value):
            return ArrivalSpec("poisson", rate=value)
        if kind == "burst" and value >= 1 and value == int(value):
            return ArrivalSpec("burst", count=int(value))
        what = "a positive rate per second" if kind == "poisson" else "a whole number >= 1"
        raise TailbudgetError(f"arrivals {text!r}: {kind} takes {what}", param="arrivals")
    if not Path(text).is_file():
        raise TailbudgetError(
            f"arrivals {text!r}: not poisson:RATE, burst:N or an existing CSV file",
            param="arrivals",
        )
    return ArrivalSpec("trace", trace=read_trace(text))


def make_arrivals(
    spec: ArrivalSpec,
    *,
    pool: int,
    load: float,
    duration_s: float | None,
    max_requests: int | None,
    low_share: float,
    rng: np.random.Generator,
    log_times: npt.NDArray[np.float64] | None = None,
) -> tuple[Arrivals, float]:
    """The arrivals and the policy horizon (s)."""
    if not load > 0:
        raise TailbudgetError(f"load must be positive, got {load:g}", param="load")
    src: npt.NDArray[np.int64] | None = None
    tin = tout = None
    if spec.kind == "poisson":
        horizon = 3600.0 if duration_s is None else duration_s
        rate = spec.rate * load
        n = rng.poisson(rate * horizon)
        if max_requests is not None:
            n = min(n, max_requests)
        t = np.cumsum(rng.exponential(1.0 / rate, size=n))
        t = t[t <= horizon]
    elif spec.kind == "burst":
        n = max(1, round(spec.count * load))
        if max_requests is not None:
            n = min(n, max_requests)
        t = np.zeros(n)
        horizon = 60.0 if duration_s is None else duration_s
        if n <= pool:  # each logged request once, as a benchmark sends its prompts
            src = rng.permutation(pool)[:n].astype(np.int64)
    else:
        t, src, tin, tout, horizon = _replayed(spec, log_times, load, duration_s, max_requests)
    if src is None:
        src = rng.integers(0, pool, size=t.size).astype(np.int64)
    low = rng.random(t.size) < low_share
    arrivals = Arrivals(
        t_s=np.asarray(t, dtype=np.float64),
        src=src,
        low_priority=low,
        input_tokens=tin,
        output_tokens=tout,
        description=(
            f"burst:{t.size} (all at once, at t = 0)"
            if spec.kind == "burst"
            else spec.label + (f" x{load:g}" if load != 1 else "")
        ),
    )
    return arrivals, float(horizon)


_F64 = npt.NDArray[np.float64]

ONE_WINDOW_S = 60.0
"""The shortest run: one 1-minute window, so minutes in breach and replica-hours are whole."""


def replay_horizon(span_s: float, load: float, duration_s: float | None) -> tuple[float, float]:
    """(How long the recorded times are replayed, how long the run lasts), in seconds.

    Without a duration the recorded span (sped up by `load`) is replayed once, in a run of
    at least one window: a benchmark whose requests were all sent within 20 ms still runs
    until a minute is whole, as a burst does, instead of a 20 ms run whose replica-hours
    and minutes end before its requests do.
    """
    fill = (span_s / load if duration_s is None else duration_s) or 1.0
    return fill, (fill if duration_s is not None else max(fill, ONE_WINDOW_S))


def _replayed(
    spec: ArrivalSpec,
    log_times: _F64 | None,
    load: float,
    duration_s: float | None,
    max_requests: int | None,
) -> tuple[_F64, npt.NDArray[np.int64] | None, _F64 | None, _F64 | None, float]:
    """A recorded trace or log's arrivals, sped up by `load` and repeated to fill the horizon:
    times, each one's logged request (a log) or its tokens (a trace), and the horizon."""
    base, tin_all, tout_all = _recorded(spec, log_times)
    span = float(base[-1]) if base.size else 0.0
    fill, horizon = replay_horizon(span, load, duration_s)
    reps = max(1, math.ceil(fill * load / max(span, 1e-9))) if span > 0 else 1
    idx = np.tile(np.arange(base.size), reps)
    t = (np.concatenate([base + k * span for k in range(reps)]) / load) if reps else base
    keep = t <= fill
    if max_requests is not None:
        keep &= np.arange(t.size) < max_requests
    t, idx = t[keep], idx[keep]
    if spec.kind == "log":
        return t, idx.astype(np.int64), None, None, horizon
    tin = None if tin_all is None else tin_all[idx]
    tout = None if tout_all is None else tout_all[idx]
    return t, None, tin, tout, horizon


def _recorded(
    spec: ArrivalSpec, log_times: npt.NDArray[np.float64] | None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64] | None, npt.NDArray[np.float64] | None]:
    if spec.kind == "trace":
        assert spec.trace is not None
        return spec.trace.t_s, spec.trace.input_tokens, spec.trace.output_tokens
    if log_times is None or log_times.size < 2:
        raise TailbudgetError(
            "arrivals: the log has no timestamps to replay; give arrivals as poisson:RATE, "
            "burst:N or a CSV trace",
            param="arrivals",
        )
    return log_times - log_times[0], None, None
