"""Per-request rows from LLM load-generator results, before they go on the engine.

Every benchmark reader turns its file into `BenchRows`: one dict per request
with the canonical columns (request_id, ts, total_ms, ttft_ms, decode_ms,
error, input_tokens, output_tokens, tpot_ms, optional itl_ms and summaries),
plus the requests that failed without any latency (counted with their
reason, never silently dropped) and those left out for another reason.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeGuard

import numpy as np
import pyarrow as pa

from tailbudget.errors import LogError

__all__ = [
    "BenchRows",
    "as_dict",
    "derived_row",
    "epoch_us",
    "failure_reason",
    "is_number",
    "number",
    "seconds",
    "text_lines",
    "to_arrow",
    "with_itls",
]

_EPOCH = datetime(1970, 1, 1)  # naive UTC, as the canonical ts column
_REASON_CHARS = 80
_URL = re.compile(r"\w+://[^\s'\"]+")


@dataclass
class BenchRows:
    """What one result file holds, request by request."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    failed: Counter[str] = field(default_factory=Counter)
    """Requests that failed before giving a latency, by reason: errors, not latency rows."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Requests left out for a reason other than an error (e.g. still running at the end)."""
    notes: list[str] = field(default_factory=list)
    all_at_once: bool = False
    """Every request was sent at the same instant (an unlimited request rate, no cap on
    concurrency): each one's start is the run's start, so who ran together is known."""

    def extend(self, other: BenchRows, prefix: str) -> None:
        """Add another file's (or run's) requests, their ids prefixed."""
        for row in other.rows:
            row["request_id"] = prefix + str(row["request_id"])
        self.rows.extend(other.rows)
        self.failed.update(other.failed)
        self.skipped.update(other.skipped)
        self.notes.extend(n for n in other.notes if n not in self.notes)


def derived_row(
    rid: Any, ttft: Any, e2e: Any, n_in: Any, n_out: Any, failed: bool
) -> dict[str, Any]:
    """One canonical row from seconds; values that are not numbers stay text to be rejected."""
    numbers = isinstance(ttft, float) and isinstance(e2e, float)
    out = float(n_out) if is_number(n_out) else None
    tpot = None
    if numbers and out is not None and out > 1:
        tpot = (e2e - ttft) / (out - 1) * 1000.0
    return {
        "request_id": str(rid),
        "total_ms": e2e * 1000.0 if isinstance(e2e, float) else e2e,
        "ttft_ms": ttft * 1000.0 if isinstance(ttft, float) else ttft,
        "decode_ms": (e2e - ttft) * 1000.0 if numbers else None,
        "input_tokens": float(n_in) if is_number(n_in) else None,
        "output_tokens": out,
        "tpot_ms": tpot,
        "error": failed,
    }


def with_itls(row: dict[str, Any], gaps_ms: list[float] | None) -> dict[str, Any]:
    """The row with its inter-token gaps (ms) and their per-request p50/p95."""
    if gaps_ms is None:
        return row
    clean = [g for g in gaps_ms if math.isfinite(g)]
    row["itl_ms"] = clean
    if clean:
        ms = np.asarray(clean, dtype=float)
        row["itl_p50_ms"] = float(np.percentile(ms, 50))
        row["itl_p95_ms"] = float(np.percentile(ms, 95))
    return row


def failure_reason(text: object, default: str = "error", *, last_line: bool = True) -> str:
    """A short reason for a failed request: the last line of a traceback (or the first
    line of a message), URLs left out so one failure is one reason, trimmed."""
    # repr()-ed exceptions carry their newlines escaped
    lines = [ln.strip() for ln in str(text or "").replace("\\n", "\n").splitlines() if ln.strip()]
    reason = (lines[-1] if last_line else lines[0]) if lines else default
    reason = _URL.sub("<url>", reason)
    return reason if len(reason) <= _REASON_CHARS else reason[: _REASON_CHARS - 3] + "..."


def as_dict(value: object) -> dict[str, Any]:
    """The value when it is a JSON object, else an empty one (a malformed field)."""
    return value if isinstance(value, dict) else {}


def number(value: object) -> float | None:
    """The value as a float when it is a JSON number, else None."""
    return float(value) if is_number(value) else None


def seconds(value: object) -> float | str | None:
    """A float for numbers, None for null, the text itself otherwise (to be rejected)."""
    if value is None:
        return None
    if is_number(value):
        return float(value)
    return str(value)


def is_number(value: object) -> TypeGuard[int | float]:
    """A JSON number that fits a float (NaN and inf included: they are rejected later)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, float) or abs(value) < 2**1000


def epoch_us(value: float) -> datetime | None:
    """An epoch time in seconds as a naive UTC datetime (microseconds), None when out of range."""
    if not math.isfinite(value) or abs(value) > 1e11:
        return None
    return _EPOCH + timedelta(microseconds=round(value * 1e6))


def to_arrow(rows: list[dict[str, Any]]) -> pa.Table:
    """The rows as an Arrow table: floats, text where a cell is not a number, lists, times."""
    columns: dict[str, pa.Array] = {}
    for key in dict.fromkeys(k for r in rows for k in r):
        values = [r.get(key) for r in rows]
        if key == "error":
            columns[key] = pa.array([bool(v) for v in values], pa.bool_())
        elif key == "ts":
            columns[key] = pa.array(values, pa.timestamp("us"))
        elif key == "itl_ms":
            columns[key] = pa.array(
                [[] if v is None else v for v in values], pa.list_(pa.float64())
            )
        elif key == "request_id" or not all(v is None or isinstance(v, float) for v in values):
            # mixed numbers and text: keep text, canonicalisation counts it as non_numeric
            columns[key] = pa.array([None if v is None else str(v) for v in values], pa.string())
        else:
            columns[key] = pa.array(values, pa.float64())
    return pa.table(columns)


def text_lines(path: str) -> list[tuple[int, str]]:
    """The non-blank lines of a text file with their numbers, or LogError naming it."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [(i, ln) for i, ln in enumerate(fh, 1) if ln.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise LogError(f"{path}: cannot read ({exc}); check the file") from exc


DECODE_BATCH = "decode_batch"
"""Column: the mean number of other requests decoding while this one decoded."""


def with_decode_batch(rows: list[dict[str, Any]]) -> None:
    """Give each row of an all-at-once run the batch it decoded in (`decode_batch`).

    Every request starts at 0, so its decode runs from its TTFT to its end: the
    time-average of how many other decodes overlap that span is the batch it ran at.
    F(t), the integral of the number decoding up to t, is piecewise linear between
    events, so each span costs two look-ups (a sweep, n log n), never a pair loop.
    """
    spans = [
        (i, float(r["ttft_ms"]), float(r["total_ms"]))
        for i, r in enumerate(rows)
        if isinstance(r.get("ttft_ms"), float) and isinstance(r.get("total_ms"), float)
    ]
    if len(spans) < 2:
        return
    begin = np.array([s[1] for s in spans])
    end = np.array([s[2] for s in spans])
    at = np.concatenate([begin, end])
    step = np.concatenate([np.ones_like(begin), -np.ones_like(end)])
    order = np.lexsort((step, at))  # an end before a start at the same instant
    at, step = at[order], step[order]
    decoding = np.cumsum(step)[:-1]  # how many decode between event k and k+1
    area = np.concatenate([[0.0], np.cumsum(decoding * np.diff(at))])
    total = np.interp(end, at, area) - np.interp(begin, at, area)
    length = end - begin
    with np.errstate(invalid="ignore", divide="ignore"):
        batch = np.where(length > 0, total / length - 1.0, np.nan)
    for (i, _, _), b in zip(spans, batch, strict=True):
        if math.isfinite(b):
            rows[i][DECODE_BATCH] = max(float(b), 0.0)
