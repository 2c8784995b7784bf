"""The per-request record and its flattening into log columns.

A `Record` is what a finished request hands to the writer thread: raw
`perf_counter_ns` stamps and the stage timers themselves, so the request path
does no arithmetic and no formatting. `to_rows` turns a batch of records into
the columns `tailbudget audit` reads by default (`request_id`, `ts`,
`total_ms`, `<stage>_ms`, `error`, covariates as plain columns), off the
request path; `spans_of` gives span-ready stamps for tracing sinks.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from tailbudget.measure.stream import StreamTimer

Stage = tuple[str, int, int, "int | None", "str | None"]
"""One stage occurrence: (name, t0_ns, t1_ns, parent's t0_ns or None, error type or None)."""

log = logging.getLogger("tailbudget.measure")

STREAM_COLUMNS = (
    "ttft_ms",
    "decode_ms",
    "output_tokens",
    "itl_p50_ms",
    "itl_p95_ms",
    "tokens_per_s",
)
"""Columns an LLM stream adds. ttft/decode are stage-like (nested in the LLM stage);
`tailbudget.logs` knows `itl_p50_ms`/`itl_p95_ms` are per-request metrics, not stages."""

RESERVED = frozenset({"request_id", "ts", "total_ms", "error", "error_type", "degraded"})
"""Column names a covariate cannot take (the recorder's own columns win)."""


class Extra:
    """Rarely used per-request data, allocated only when needed."""

    __slots__ = ("degraded", "error", "streams")

    def __init__(self) -> None:
        self.error: str | None = None
        self.degraded: list[str] = []
        self.streams: list[StreamTimer[Any]] = []


class Record(NamedTuple):
    """One finished request, as raw stamps (frozen: a tuple)."""

    request_id: int | str
    """An int is a sequence number, formatted with the recorder's prefix off-path."""
    start_ns: int
    end_ns: int
    stages: Sequence[Stage]
    error: str | None
    """Name of the exception that escaped the request block, if any."""
    fields: Sequence[tuple[str, Any]]
    """Covariates as (name, value) pairs, in the order given."""
    extra: Extra | None


class IsoTime:
    """Epoch ns -> ISO-8601 UTC with microseconds, caching the per-second prefix."""

    __slots__ = ("_prefix", "_sec")

    def __init__(self) -> None:
        self._sec = -1
        self._prefix = ""

    def __call__(self, ns: int) -> str:
        sec, rem = divmod(ns, 1_000_000_000)
        if sec != self._sec:
            self._sec = sec
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return f"{self._prefix}.{rem // 1000:06d}Z"


@dataclass(slots=True)
class Clock:
    """Maps perf_counter_ns stamps to epoch nanoseconds; re-anchored each batch."""

    wall_ns: int
    perf_ns: int

    def epoch_ns(self, perf_ns: int) -> int:
        """Epoch nanoseconds of a perf_counter_ns stamp."""
        return self.wall_ns - (self.perf_ns - perf_ns)


def error_of(record: Record) -> str | None:
    """The request's error: an escaped exception's name, or a reason given by `req.fail`."""
    if record.error is not None:
        return record.error
    return record.extra.error if record.extra is not None else None


def request_id_of(record: Record, prefix: str) -> str:
    """The request id as written to the log."""
    rid = record.request_id
    return f"{prefix}{rid:08x}" if isinstance(rid, int) else str(rid)


def valid_stages(record: Record) -> list[Stage]:
    """The record's stages that are well formed and ended within the request (misuse logged)."""
    out: list[Stage] = []
    end = record.end_ns
    for st in list(record.stages):
        try:
            name, t0, t1, _, _ = st
            ok = isinstance(name, str) and isinstance(t0, int) and isinstance(t1, int)
        except (TypeError, ValueError):
            ok, name, t1 = False, None, 0
        if not ok:
            log.warning("tailbudget: dropped a malformed stage (%r)", name)
        elif t1 > end:
            log.warning("tailbudget: stage %r ended after its request; dropped", name)
        else:
            out.append(st)
    return out


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    # Linear interpolation between closest ranks (numpy's default method).
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class StreamStats(NamedTuple):
    """Timing of one streamed LLM response (ms, tokens, tokens/s)."""

    ttft_ms: float | None
    decode_ms: float | None
    output_tokens: int
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    tokens_per_s: float | None


def stream_stats(
    start_ns: int, token_ns: Sequence[int], counts: Sequence[int] | None = None
) -> StreamStats:
    """TTFT, decode, output tokens, ITL p50/p95 (ms) and tokens/s from chunk arrival stamps.

    `counts[i]` is the number of tokens in chunk i (1 each when None). Tokens/s
    is (tokens after the first chunk) / decode time, i.e. 1 / TPOT as vLLM
    defines it ((e2e - ttft) / (output_tokens - 1)).
    """
    n_chunks = len(token_ns)
    tokens = sum(counts) if counts is not None else n_chunks
    if n_chunks == 0:
        return StreamStats(None, None, 0, None, None, None)
    ttft = max(0, token_ns[0] - start_ns) / 1e6
    decode = max(0, token_ns[-1] - token_ns[0]) / 1e6
    if n_chunks < 2:
        return StreamStats(ttft, decode, tokens, None, None, None)
    gaps = sorted(max(0, b - a) / 1e6 for a, b in pairwise(token_ns))
    first = counts[0] if counts is not None else 1
    rate = (tokens - first) / (decode / 1000.0) if decode > 0 else None
    return StreamStats(ttft, decode, tokens, _quantile(gaps, 0.5), _quantile(gaps, 0.95), rate)


def stats_of(stream: StreamTimer[Any]) -> StreamStats:
    """Stream statistics of one wrapped stream."""
    return stream_stats(stream.start_ns, list(stream.token_ns), stream.counts)


def to_rows(
    records: Iterable[Record],
    clock: Clock,
    prefix: str,
    repeated: set[str],
    iso: IsoTime | None = None,
) -> list[dict[str, Any]]:
    """Rows in audit column names, one per record; `ts` is ISO-8601 UTC text.

    Repeated stages are summed; `repeated` (updated here) names stages that
    ever repeated, which get a `<stage>_count` column from then on. Negative
    durations are clamped to 0.
    """
    rows: list[dict[str, Any]] = []
    append = rows.append
    iso = iso or IsoTime()
    wall = clock.wall_ns - clock.perf_ns
    cols = _COLUMNS
    reserved = RESERVED
    # The ISO prefix is cached per second; only the microseconds are formatted per row.
    sec_now, ts_prefix = iso._sec, iso._prefix
    for r in records:
        rid, start, end, stages, err, fields, extra = r
        ns = wall + start
        sec, rem = divmod(ns, 1_000_000_000)
        if sec != sec_now:
            iso(ns)
            sec_now, ts_prefix = iso._sec, iso._prefix
        row: dict[str, Any] = {
            "request_id": f"{prefix}{rid:08x}" if isinstance(rid, int) else str(rid),
            "ts": f"{ts_prefix}.{rem // 1000:06d}Z",
            "total_ms": (end - start) / 1e6 if end > start else 0.0,
            "error": False,
        }
        counts: dict[str, int] | None = None
        try:
            for name, t0, t1, _, _ in stages:
                col = cols.get(name) or _column(name)
                if t1 > end:
                    raise ValueError(name)
                ms = (t1 - t0) / 1e6 if t1 > t0 else 0.0
                if col in row:
                    row[col] += ms
                    if counts is None:
                        counts = {}
                    counts[name] = counts.get(name, 1) + 1
                else:
                    row[col] = ms
        except (AttributeError, TypeError, ValueError):
            row = _slow_row(r, row)  # a misused stage: redo with checks, logged
            counts = _counts(r)
        if counts is not None:
            repeated.update(counts)
        if repeated:
            for name in repeated:
                if _column(name) in row:
                    row[f"{name}_count"] = counts.get(name, 1) if counts else 1
        if extra is not None:
            _add_extra(row, extra, err)
            if err is None:
                err = extra.error
        if err is not None:
            row["error"] = True
            row["error_type"] = err
        for key, value in fields:
            if key not in row and key not in reserved:
                row[key] = value
        append(row)
    return rows


_COLUMNS: dict[str, str] = {}
"""stage name -> column name, shared by every batch (stage names are few)."""


def _column(stage: str) -> str:
    col = _COLUMNS.get(stage)
    if col is None:
        col = f"{stage}_ms"
        # A stage called "total" must not add itself to the request's total.
        if col == "total_ms":
            col = "stage_total_ms"
        if len(_COLUMNS) < 10_000:  # bounded: misuse with endless names cannot grow it
            _COLUMNS[stage] = col
    return col


def _slow_row(r: Record, row: dict[str, Any]) -> dict[str, Any]:
    base = {k: row[k] for k in ("request_id", "ts", "total_ms", "error")}
    for name, t0, t1, _, _ in valid_stages(r):
        col = _column(name)
        d = t1 - t0
        base[col] = base.get(col, 0.0) + (d / 1e6 if d > 0 else 0.0)
    return base


def _counts(r: Record) -> dict[str, int] | None:
    seen: dict[str, int] = {}
    for st in valid_stages(r):
        seen[st[0]] = seen.get(st[0], 0) + 1
    repeated = {k: v for k, v in seen.items() if v > 1}
    return repeated or None


def _add_extra(row: dict[str, Any], extra: Extra, err: str | None) -> None:
    if extra.degraded:
        row["degraded"] = ",".join(extra.degraded)
    if extra.streams:
        stats = stats_of(extra.streams[0])
        for col, value in zip(STREAM_COLUMNS, stats, strict=True):
            row[col] = value


class SpanStamp(NamedTuple):
    """One timed stage occurrence in epoch ns, with the index of its parent stage."""

    name: str
    start_ns: int
    end_ns: int
    parent: int | None
    error: str | None


def spans_of(record: Record, clock: Clock) -> tuple[list[SpanStamp], dict[int, int]]:
    """Stage occurrences in epoch ns, parents resolved, and {perf t0: index} for streams."""
    index: dict[int, int] = {}
    spans: list[SpanStamp] = []
    for name, t0, t1, parent_t0, error in sorted(valid_stages(record), key=lambda st: st[1]):
        spans.append(
            SpanStamp(
                name,
                clock.epoch_ns(t0),
                clock.epoch_ns(max(t0, t1)),
                index.get(parent_t0) if parent_t0 is not None else None,
                error,
            )
        )
        index[t0] = len(spans) - 1
    return spans, index
