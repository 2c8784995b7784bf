"""Arrival processes: the log's own times, a CSV or Mooncake trace, `poisson:RATE` or `burst:N`.

A load multiple L scales the offered rate: Poisson and burst multiply rate or count;
recorded times (the log's, a trace's) are compressed by L (bursts keep their
shape, only closer together) and repeated to fill the duration.
"""

from __future__ import annotations

import csv
import json
import math
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.errors import TailbudgetError
from tailbudget.sim.trace import Arrivals

__all__ = [
    "ArrivalSpec",
    "TraceTimes",
    "make_arrivals",
    "parse_arrivals",
    "read_mooncake",
    "read_trace",
]

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
    classes: npt.NDArray[np.str_] | None = None
    """Each arrival's class, from the column (a Mooncake line's field) named as the
    budget's `classes.by` or `class_by`."""
    blocks: tuple[tuple[int, ...], ...] | None = None
    """Each prompt's KV-cache block hashes (Mooncake `hash_ids`, 512 tokens a block)."""


@dataclass(frozen=True)
class ArrivalSpec:
    """A parsed arrivals value (poisson:RATE, burst:N or a CSV trace)."""

    kind: str
    """log | trace | poisson | burst"""
    rate: float = 0.0
    count: int = 0
    trace: TraceTimes | None = None
    in_order: bool = False
    """A benchmark's own run: its `count` logged requests once each, in the order sent
    (poisson with a count: exactly that many at the rate, the first at t = 0)."""

    @property
    def label(self) -> str:
        """How reports name it."""
        if self.kind == "poisson" and self.count:
            return f"poisson:{self.rate:g}, {self.count} requests (the benchmark's own run)"
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
                f"{where}arrival time {text!r} is neither ISO-8601 nor epoch seconds",
                param="arrivals",
            ) from None
        value = math.nan if np.isnat(stamp) else float(stamp.astype(np.int64)) / 1e6
    if not (math.isfinite(value) and value >= 0):
        raise TailbudgetError(
            f"{where}arrival time {text!r} must be a finite time at or after 1970 (epoch seconds, "
            "or seconds from the start)",
            param="arrivals",
        )
    return value


MAX_TOKENS = 10_000_000
"""Tokens one request may carry in a trace: beyond any model's context; a larger count
would only make the simulator step one decode at a time for ever."""
MAX_TRACE_ROWS = 20_000_000
"""Arrivals a trace may hold (also bounded by max_events): checked while reading, so a
300 MB CSV is refused at the bound, not read whole first."""


def _tokens(text: str | None, where: str, col: str) -> float:
    try:
        value = float(text or "")
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= MAX_TOKENS):
        raise TailbudgetError(
            f"{where}{col} {text!r} must be a token count from 0 to {MAX_TOKENS:,}",
            param="arrivals",
        )
    return value


def _columns(path: str, header: list[str] | None) -> tuple[int, int | None, int | None]:
    if not header:
        raise TailbudgetError(f"{path}: the arrival trace has no rows", param="arrivals")
    cols = {k.strip().lower(): i for i, k in enumerate(header) if k}
    tcol = next((cols[c] for c in _TIME if c in cols), None)
    if tcol is None:
        raise TailbudgetError(
            f"{path}: no arrival time column; name one of {', '.join(_TIME)}", param="arrivals"
        )
    return (
        tcol,
        next((cols[c] for c in _IN if c in cols), None),
        next((cols[c] for c in _OUT if c in cols), None),
    )


def _read_rows(path: str, fh: Any, max_rows: int) -> tuple[array[float], ...]:
    """Times, input and output tokens, each field checked as its row is read."""
    reader = csv.reader(fh)
    header = next(reader, None)
    tcol, icol, ocol = _columns(path, header)
    assert header is not None
    names = [header[c] if c is not None else "" for c in (icol, ocol)]
    t, tin, tout = array("d"), array("d"), array("d")
    for i, row in enumerate(reader):
        if i >= max_rows:
            raise TailbudgetError(
                f"{path}: the arrival trace holds more than {max_rows:,} arrivals, over the "
                "simulator's bound; cut it to the span to simulate, or raise max_events",
                param="arrivals",
            )
        where = f"{path}, line {reader.line_num}: "
        cell = row[tcol] if tcol < len(row) else ""
        t.append(_time_s(cell, where))
        for col, name, out in ((icol, names[0], tin), (ocol, names[1], tout)):
            if col is not None:
                out.append(_tokens(row[col] if col < len(row) else "", where, name))
    if not t:
        raise TailbudgetError(f"{path}: the arrival trace has no rows", param="arrivals")
    return t, tin if icol is not None else array("d"), tout if ocol is not None else array("d")


def _hash_ids(row: dict[str, object]) -> tuple[int, ...]:
    """A line's `hash_ids` (ints), empty when absent or not a list of whole numbers."""
    ids = row.get("hash_ids")
    if not isinstance(ids, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in ids
    ):
        return ()
    return tuple(ids)


_MoonRow = tuple[float, float, float, tuple[int, ...], str | None]


def _class_field(row: dict[str, object], by: str | None) -> str | None:
    """A line's class (its `by` field as text; None when it has none)."""
    value = row.get(by) if by is not None else None
    if value is None or isinstance(value, dict | list):
        return None
    return str(value).strip()


def _mooncake_row(line: str, where: str, class_by: str | None = None) -> _MoonRow:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TailbudgetError(f"{where}not a JSON object ({exc.msg})", param="arrivals") from None
    if not isinstance(row, dict) or not {"timestamp", "input_length", "output_length"} <= set(row):
        raise TailbudgetError(
            f"{where}a Mooncake trace line has timestamp (ms), input_length and output_length",
            param="arrivals",
        )
    vals = (row["timestamp"], row["input_length"], row["output_length"])
    if (
        not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            for v in vals
        )
        or max(vals[1:]) > MAX_TOKENS
    ):
        raise TailbudgetError(
            f"{where}timestamp, input_length and output_length must be numbers >= 0 (tokens "
            f"at most {MAX_TOKENS:,}), got {vals!r}",
            param="arrivals",
        )
    return (
        float(vals[0]) / 1000.0,
        float(vals[1]),
        float(vals[2]),
        _hash_ids(row),
        _class_field(row, class_by),
    )


@contextmanager
def _read_errors(path: str, not_text: str = "") -> Iterator[None]:
    """The arrival readers' one-line errors for a file that cannot be read (`not_text`:
    what to give instead, after the not-UTF-8 error)."""
    try:
        yield
    except OSError as exc:
        raise TailbudgetError(
            f"{path}: cannot read arrival trace ({exc.strerror})", param="arrivals"
        ) from None
    except UnicodeDecodeError as exc:
        raise TailbudgetError(
            f"{path}: the arrival trace is not UTF-8 text (byte {exc.start}){not_text}",
            param="arrivals",
        ) from None
    except csv.Error as exc:
        raise TailbudgetError(
            f"{path}: not a readable CSV arrival trace ({exc})", param="arrivals"
        ) from None


def read_mooncake(
    path: str, max_rows: int = MAX_TRACE_ROWS, class_by: str | None = None
) -> TraceTimes:
    """A Mooncake trace (JSON lines: `timestamp` in ms from the start, `input_length`,
    `output_length`, and `hash_ids`: the prompt's 512-token KV blocks, which give each
    request's prefix-cache hits through an LRU per replica in the LLM engine). With
    `class_by`, each line's field of that name is its arrival's class (a line without
    it: the empty class, judged as an unlisted class is)."""
    rows: list[_MoonRow] = []
    with _read_errors(path), open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if len(rows) >= max_rows:
                raise TailbudgetError(
                    f"{path}: the arrival trace holds more than {max_rows:,} arrivals, "
                    "over the simulator's bound; cut it to the span to simulate",
                    param="arrivals",
                )
            rows.append(_mooncake_row(line, f"{path}, line {i}: ", class_by))
    if not rows:
        raise TailbudgetError(f"{path}: the arrival trace has no rows", param="arrivals")
    got = np.asarray([r[:3] for r in rows])
    order = np.argsort(got[:, 0], kind="stable")
    got = got[order]
    blocks = tuple(rows[k][3] for k in order) if any(r[3] for r in rows) else None
    classes = None
    if any(r[4] is not None for r in rows):
        classes = np.asarray([rows[k][4] or "" for k in order], dtype=np.str_)
    return TraceTimes(
        got[:, 0] - got[0, 0], got[:, 1], got[:, 2], path, classes=classes, blocks=blocks
    )


def _class_column(path: str, by: str, size: int) -> npt.NDArray[np.str_] | None:
    """The trace's `by` column as text, in file order (None when it has no such column)."""
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = [k.strip() for k in next(reader, None) or []]
        if by not in header:
            return None
        col = header.index(by)
        values = [row[col].strip() if col < len(row) else "" for row in reader]
    return np.asarray(values[:size], dtype=np.str_)


def read_trace(
    path: str, max_rows: int = MAX_TRACE_ROWS, class_by: str | None = None
) -> TraceTimes:
    """A CSV of arrival times (first matching column), with token counts when present.

    Read row by row: every time and token count is checked as it is read (a time before
    1970, a token count of -5, NaN or inf names its line), and more than `max_rows`
    arrivals are refused at the bound. A `.jsonl` file is read as a Mooncake trace."""
    if path.lower().endswith(".jsonl"):
        return read_mooncake(path, max_rows, class_by)
    hint = "; give a CSV with a time column"
    with _read_errors(path, hint), open(path, encoding="utf-8", newline="") as fh:
        t, tin, tout = _read_rows(path, fh, min(max_rows, MAX_TRACE_ROWS))
    times = np.frombuffer(t, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    times = times[order]

    def tokens(values: array[float]) -> npt.NDArray[np.float64] | None:
        return np.frombuffer(values, dtype=np.float64)[order] if len(values) else None

    classes = None if class_by is None else _class_column(path, class_by, times.size)
    return TraceTimes(
        times - times[0],
        tokens(tin),
        tokens(tout),
        path,
        None if classes is None else classes[order],
    )


def parse_arrivals(
    text: str | None, max_rows: int = MAX_TRACE_ROWS, class_by: str | None = None
) -> ArrivalSpec:
    """None (the log's times), 'poisson:RATE', 'burst:N' or a CSV path (at most
    `max_rows` arrivals; with `class_by`, its column of that name is each arrival's class)."""
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
    return ArrivalSpec("trace", trace=read_trace(text, max_rows, class_by))


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
    classes, blocks = None, None
    if spec.kind == "poisson" and spec.count and duration_s is None:
        n = max(1, round(spec.count * load))
        n = n if max_requests is None else min(n, max_requests)
        gaps = rng.exponential(1.0 / (spec.rate * load), size=n - 1)
        t = np.concatenate([[0.0], np.cumsum(gaps)])
        horizon = max(float(t[-1]), ONE_WINDOW_S)
        if spec.in_order and n <= pool:
            src = np.arange(n, dtype=np.int64)
    elif spec.kind == "poisson":
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
        if n <= pool and spec.in_order:  # the benchmark's own burst, in its order
            src = np.arange(n, dtype=np.int64)
        elif n <= pool:  # each logged request once, as a benchmark sends its prompts
            src = rng.permutation(pool)[:n].astype(np.int64)
    else:
        t, src, tin, tout, horizon, idx = _replayed(spec, log_times, load, duration_s, max_requests)
        classes, blocks = _trace_extras(spec.trace, t.size, idx)
    if src is None:
        src = rng.integers(0, pool, size=t.size).astype(np.int64)
    low = rng.random(t.size) < low_share
    arrivals = Arrivals(
        t_s=np.asarray(t, dtype=np.float64),
        src=src,
        low_priority=low,
        input_tokens=tin,
        output_tokens=tout,
        classes=classes,
        blocks=blocks,
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
) -> tuple[
    _F64, npt.NDArray[np.int64] | None, _F64 | None, _F64 | None, float, npt.NDArray[np.intp]
]:
    """A recorded trace or log's arrivals, sped up by `load` and repeated to fill the horizon:
    times, each one's logged request (a log) or its tokens (a trace), the horizon, and each
    arrival's row of the recording."""
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
        return t, idx.astype(np.int64), None, None, horizon, idx
    tin = None if tin_all is None else tin_all[idx]
    tout = None if tout_all is None else tout_all[idx]
    return t, None, tin, tout, horizon, idx


def _trace_extras(
    trace: TraceTimes | None, n: int, idx: npt.NDArray[np.intp]
) -> tuple[npt.NDArray[np.str_] | None, tuple[tuple[int, ...], ...] | None]:
    """Each replayed arrival's class and KV blocks, when the trace has them."""
    if trace is None:
        return None, None
    classes = None if trace.classes is None else trace.classes[_trace_index(trace.t_s.size, n)]
    blocks = None if trace.blocks is None else tuple(trace.blocks[k] for k in idx.tolist())
    return classes, blocks


def _trace_index(size: int, n: int) -> npt.NDArray[np.int64]:
    """Which trace row each of the first `n` replayed arrivals is (the trace repeats in
    order to fill the horizon, as `_replayed` tiles it)."""
    return np.arange(n, dtype=np.int64) % max(size, 1)


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
