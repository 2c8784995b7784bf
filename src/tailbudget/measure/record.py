"""The per-request record and its flattening into log columns.

A `Record` is what a finished request hands to the writer thread: raw
`perf_counter_ns` stamps in flat tuples, so the request path does no
arithmetic, no formatting and leaves the cyclic GC almost nothing to track
while records wait for the writer. `to_rows` turns a batch of records into
the columns `tailbudget audit` reads by default (`request_id`, `ts`,
`total_ms`, `<stage>_ms`, `error`, covariates as plain columns), off the
request path; `spans_of` gives span-ready stamps for tracing sinks.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import sub
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from tailbudget.measure.stream import StreamTimer

Stage = tuple[str, int, int]
"""One stage occurrence: (name, t0_ns, t1_ns); a nested stage's name is `parent/child`."""

STAGE_WIDTH = 3
"""A record's `stages` is flat: STAGE_WIDTH values per occurrence, in `Stage` order."""

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

    __slots__ = ("degraded", "error", "stage_errors", "streams")

    def __init__(self) -> None:
        self.error: str | None = None
        self.degraded: list[str] = []
        self.streams: list[StreamTimer[Any]] = []
        self.stage_errors: dict[int, str] = {}
        """Exception type names by stage occurrence (its position in `Record.stages`)."""


class Record(NamedTuple):
    """One finished request, as raw stamps (frozen: a tuple)."""

    request_id: int | str
    """An int is a sequence number, formatted with the recorder's prefix off-path."""
    start_ns: int
    end_ns: int
    stages: Sequence[Any]
    """Stage occurrences in the order they ended, flat: name, t0, t1, name, t0, t1, ...
    (`valid_stages` gives the well-formed ones as `Stage` tuples)."""
    error: str | None
    """Name of the exception that escaped the request block, if any."""
    fields: Mapping[str, Any]
    """Covariates, in the order given."""
    extra: Extra | None


def utc_second(sec: int) -> str:
    """Epoch seconds -> `YYYY-MM-DDTHH:MM:SS` (UTC), the part of `ts` before the dot."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))


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
            self._prefix = utc_second(sec)
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
    return f"{prefix}{rid}" if isinstance(rid, int) else str(rid)


def valid_stages(record: Record) -> list[Stage]:
    """The record's stages that are well formed and ended within the request (misuse logged)."""
    return [st for _, st in _valid(record)]


def _valid(record: Record) -> list[tuple[int, Stage]]:
    out: list[tuple[int, Stage]] = []
    end = record.end_ns
    flat = list(record.stages)
    if len(flat) % STAGE_WIDTH:
        log.warning("tailbudget: dropped a malformed stage list (%d values)", len(flat))
        flat = flat[: len(flat) - len(flat) % STAGE_WIDTH]
    for i in range(0, len(flat), STAGE_WIDTH):
        name, t0, t1 = flat[i : i + STAGE_WIDTH]
        ok = isinstance(name, str) and isinstance(t0, int) and isinstance(t1, int)
        if not ok:
            log.warning("tailbudget: dropped a malformed stage (%r)", name)
        elif t1 > end:
            log.warning("tailbudget: stage %r ended after its request; dropped", name)
        else:
            out.append((i // STAGE_WIDTH, (name, t0, t1)))
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


_MS = (1e6).__rtruediv__
"""ns -> ms, callable from C (`map`), so a row's durations cost no Python frame."""


# One loop body on purpose: a helper call per row would cost more than the row (bench/measure.py).
def to_rows(  # noqa: PLR0915
    records: Iterable[Record],
    clock: Clock,
    prefix: str,
    repeated: set[str],
    iso: IsoTime | None = None,
) -> list[dict[str, Any]]:
    """Rows in audit column names, one per record; `ts` is ISO-8601 UTC text.

    Repeated stages are summed; `repeated` (updated here) names stages that
    ever repeated, which get a `<stage>_count` column from then on. Negative
    durations are clamped to 0; stages that ended after their request or are
    malformed are dropped (logged).
    """
    rows: list[dict[str, Any]] = []
    append = rows.append
    iso = iso or IsoTime()
    wall = clock.wall_ns - clock.perf_ns
    col_of = _COLUMNS.__getitem__
    reserved = RESERVED
    # The ISO prefix is cached per second; only the microseconds are formatted per row.
    sec_now, ts_prefix = iso._sec, iso._prefix
    for r in records:
        rid, start, end, stages, err, fields, extra = r
        sec, rem = divmod(wall + start, 1_000_000_000)
        if sec != sec_now:
            iso(wall + start)
            sec_now, ts_prefix = iso._sec, iso._prefix
        row: dict[str, Any] = {
            "request_id": f"{prefix}{rid}" if isinstance(rid, int) else str(rid),
            "ts": f"{ts_prefix}.{rem // 1000:06d}Z",
            "total_ms": (end - start) / 1e6 if end > start else 0.0,
            "error": False,
        }
        counts: dict[str, int] | None = None
        if stages:
            # Whole-row builtins (slices, map, zip run in C); anything unusual -
            # a repeated stage, a new name, a negative or late stage, a malformed
            # tuple - falls back to the checked path below.
            try:
                names = stages[0::STAGE_WIDTH]
                ends = stages[2::STAGE_WIDTH]
                durations = list(map(sub, ends, stages[1::STAGE_WIDTH]))
                row.update(zip(map(col_of, names), map(_MS, durations), strict=True))
                fast = len(row) == 4 + len(names) and min(durations) >= 0 and max(ends) <= end
            except (KeyError, TypeError, ValueError):
                fast = False
            if not fast:
                row, counts = _slow_row(r, row)
        if counts is not None:
            repeated.update(counts)
        if repeated:
            for name in repeated:
                if column_of(name) in row:
                    row[f"{name}_count"] = counts.get(name, 1) if counts else 1
        if extra is not None:
            _add_extra(row, extra, err)
            if err is None:
                err = extra.error
        if err is not None:
            row["error"] = True
            row["error_type"] = err
        if fields:
            if reserved.isdisjoint(fields) and row.keys().isdisjoint(fields):
                row.update(fields)
            else:  # the recorder's own columns win over a covariate of the same name
                for key, value in fields.items():
                    if key not in row and key not in reserved:
                        row[key] = value
        append(row)
    return rows


_COLUMNS: dict[str, str] = {}
"""stage name -> column name, shared by every batch (stage names are few)."""


def column_of(stage: str) -> str:
    """The log column of a stage name (`<stage>_ms`; a stage called total gets stage_total_ms)."""
    col = _COLUMNS.get(stage)
    if col is None:
        col = f"{stage}_ms"
        # A stage called "total" must not add itself to the request's total.
        if col == "total_ms":
            col = "stage_total_ms"
        if len(_COLUMNS) < 10_000:  # bounded: misuse with endless names cannot grow it
            _COLUMNS[stage] = col
    return col


def _slow_row(r: Record, row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int] | None]:
    base = {k: row[k] for k in ("request_id", "ts", "total_ms", "error")}
    seen: dict[str, int] = {}
    for name, t0, t1 in valid_stages(r):
        col = column_of(name)
        d = t1 - t0
        base[col] = base.get(col, 0.0) + (d / 1e6 if d > 0 else 0.0)
        seen[name] = seen.get(name, 0) + 1
    repeated = {k: v for k, v in seen.items() if v > 1}
    return base, repeated or None


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
    """Stage occurrences in epoch ns, parents resolved, and {perf t0: index} for streams.

    A stage `a/b`'s parent is the latest-started occurrence of `a` that had
    started by then: stages nest in time, so that is the one enclosing it.
    """
    index: dict[int, int] = {}
    latest: dict[str, int] = {}
    spans: list[SpanStamp] = []
    errors = record.extra.stage_errors if record.extra is not None else {}
    for i, (name, t0, t1) in sorted(_valid(record), key=lambda st: st[1][1]):
        parent = latest.get(name.rsplit("/", 1)[0]) if "/" in name else None
        spans.append(
            SpanStamp(name, clock.epoch_ns(t0), clock.epoch_ns(max(t0, t1)), parent, errors.get(i))
        )
        index[t0] = latest[name] = len(spans) - 1
    return spans, index
