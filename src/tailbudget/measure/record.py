"""The per-request record and its flattening into log columns.

A `Record` is what a finished request hands to the writer thread: raw
`perf_counter_ns` stamps and the stage timers themselves, so the request path
does no arithmetic and no formatting. `flatten` turns a batch of records into
the columns `tailbudget audit` reads by default (`request_id`, `ts`,
`total_ms`, `<stage>_ms`, `error`, covariates as plain columns), off the
request path.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from tailbudget.measure.request import StageTimer
    from tailbudget.measure.stream import StreamTimer

log = logging.getLogger("tailbudget.measure")

STREAM_COLUMNS = (
    "ttft_ms",
    "decode_ms",
    "output_tokens",
    "itl_ms_p50",
    "itl_ms_p95",
    "tokens_per_s",
)
"""Columns an LLM stream adds. ttft/decode are stage-like (`_ms`); the ITL
quantiles deliberately do not end in `_ms` so a `*_ms` stage glob skips them."""


class Record(NamedTuple):
    """One finished request, as raw stamps (frozen: a tuple)."""

    request_id: int | str
    """An int is a sequence number, formatted with the recorder's prefix off-path."""
    start_ns: int
    end_ns: int
    stages: list[StageTimer]
    error: str | None
    fields: dict[str, Any]
    degraded: list[str] | None
    streams: list[StreamTimer] | None


@dataclass(frozen=True, slots=True)
class StageSpan:
    """One timed occurrence of a stage, in epoch nanoseconds (for span exporters)."""

    name: str
    start_ns: int
    end_ns: int
    parent: int | None
    """Index of the enclosing stage's span in the same list, or None (the request)."""
    error: str | None


@dataclass(frozen=True, slots=True)
class StreamStats:
    """Timing of one streamed LLM response."""

    stage: int | None
    """Index of the enclosing stage's span, or None."""
    start_ns: int
    end_ns: int
    ttft_ms: float | None
    decode_ms: float | None
    output_tokens: int
    itl_ms_p50: float | None
    itl_ms_p95: float | None
    tokens_per_s: float | None
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Clock:
    """Maps perf_counter_ns stamps to epoch nanoseconds; re-anchored each batch."""

    wall_ns: int
    perf_ns: int

    def epoch_ns(self, perf_ns: int) -> int:
        """Epoch nanoseconds of a perf_counter_ns stamp."""
        return self.wall_ns - (self.perf_ns - perf_ns)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    # Linear interpolation between closest ranks (numpy's default method).
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def stream_stats(
    start_ns: int, token_ns: Sequence[int], counts: Sequence[int] | None = None
) -> tuple[float | None, float | None, int, float | None, float | None, float | None]:
    """TTFT, decode, output tokens, ITL p50/p95 (ms) and tokens/s from token arrival stamps.

    `counts[i]` is the number of tokens in chunk i (1 each when None). Tokens/s
    is (tokens after the first) / decode time, i.e. 1 / TPOT as vLLM defines it.
    """
    n_chunks = len(token_ns)
    tokens = sum(counts) if counts is not None else n_chunks
    if n_chunks == 0:
        return None, None, 0, None, None, None
    ttft = max(0, token_ns[0] - start_ns) / 1e6
    decode = max(0, token_ns[-1] - token_ns[0]) / 1e6
    if n_chunks < 2:
        return ttft, decode, tokens, None, None, None
    gaps = sorted(max(0, b - a) / 1e6 for a, b in zip(token_ns, token_ns[1:], strict=False))
    first = counts[0] if counts is not None else 1
    rate = (tokens - first) / (decode / 1000.0) if decode > 0 else None
    return ttft, decode, tokens, _quantile(gaps, 0.5), _quantile(gaps, 0.95), rate


class Flat(NamedTuple):
    """A record resolved off the request path: sums per stage and span-ready stamps."""

    record: Record
    request_id: str
    ts_ns: int
    """Epoch nanoseconds of the request's start."""
    total_ms: float
    stage_ms: dict[str, float]
    stage_count: dict[str, int]
    spans: list[StageSpan]
    streams: list[StreamStats]


def resolve(record: Record, clock: Clock, id_prefix: str) -> Flat:
    """Sum repeated stages, clamp negative durations, drop misused timers (logged)."""
    start, end = record.start_ns, record.end_ns
    index: dict[int, int] = {}
    spans: list[StageSpan] = []
    stage_ms: dict[str, float] = {}
    stage_count: dict[str, int] = {}
    for timer in list(record.stages):
        name, t0, t1 = timer.name, timer.t0, timer.t1
        if not isinstance(name, str) or not name or t0 is None or t1 is None:
            log.warning("tailbudget: dropped a malformed stage timer (name=%r)", name)
            continue
        if t1 > end:
            log.warning("tailbudget: stage %r ended after its request; dropped", name)
            continue
        dur = t1 - t0 if t1 > t0 else 0
        ms = dur / 1e6
        prev = stage_ms.get(name)
        if prev is None:
            stage_ms[name] = ms
            stage_count[name] = 1
        else:
            stage_ms[name] = prev + ms
            stage_count[name] += 1
        parent = index.get(id(timer.parent)) if timer.parent is not None else None
        index[id(timer)] = len(spans)
        spans.append(
            StageSpan(
                name, clock.epoch_ns(t0), clock.epoch_ns(max(t0, t1)), parent, timer.error
            )
        )
    streams: list[StreamStats] = []
    for s in record.streams or ():
        ttft, decode, tokens, p50, p95, rate = stream_stats(s.start_ns, s.token_ns, s.counts)
        last = s.token_ns[-1] if s.token_ns else s.start_ns
        streams.append(
            StreamStats(
                index.get(id(s.parent)) if s.parent is not None else None,
                clock.epoch_ns(s.start_ns),
                clock.epoch_ns(last),
                ttft,
                decode,
                tokens,
                p50,
                p95,
                rate,
                s.attributes,
            )
        )
    rid = record.request_id
    request_id = f"{id_prefix}{rid:08x}" if isinstance(rid, int) else str(rid)
    total = max(0, end - start) / 1e6
    return Flat(
        record, request_id, clock.epoch_ns(start), total, stage_ms, stage_count, spans, streams
    )


RESERVED = frozenset({"request_id", "ts", "total_ms", "error", "degraded"})


def to_rows(flats: Iterable[Flat], repeated: set[str]) -> list[dict[str, Any]]:
    """Rows in audit column names. `repeated` (updated here) names stages that ever
    repeated; they get a `<stage>_count` column from then on."""
    rows: list[dict[str, Any]] = []
    for f in flats:
        row: dict[str, Any] = {
            "request_id": f.request_id,
            "ts": f.ts_ns,
            "total_ms": f.total_ms,
            "error": f.record.error is not None,
        }
        if f.record.error is not None:
            row["error_type"] = f.record.error
        for name, ms in f.stage_ms.items():
            row[f"{name}_ms"] = ms
            n = f.stage_count[name]
            if n > 1:
                repeated.add(name)
            if name in repeated:
                row[f"{name}_count"] = n
        for s in f.streams[:1]:
            for col in STREAM_COLUMNS:
                row[col] = getattr(s, col)
        if f.record.degraded:
            row["degraded"] = ",".join(f.record.degraded)
        for key, value in f.record.fields.items():
            if key in RESERVED or key in row:
                continue
            row[key] = value
        rows.append(row)
    return rows
