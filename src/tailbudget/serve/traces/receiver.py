"""`serve --traces`: the OTLP/HTTP receiver behind POST /v1/traces.

A request's spans are written to the span log and handed to the assembler, then
fsynced before its 2xx (requests in flight share one fsync: the span log's group
commit), so an acknowledged span survives kill -9. Acknowledging never waits
for attribution: a flusher thread takes the traces that completed, attributes
them on the critical path (`attribute.Attributor`, the audit's code) and commits
one observation per trace through the runtime's write-ahead log, the same path
observations take; only then are the traces marked done in the span log. A crash
between those two fsyncs attributes those traces again at the restart (counted
twice, never lost). On start, the open traces in the span log are held again and
finish after their grace period.

Memory stays flat when attribution falls behind: past `max_held` spans in memory,
a request's spans stay in the span log only (parked, in arrival order) and the
flusher reads them back as traces complete. Traces are then completed by the
arrival time of the oldest parked span rather than the wall clock, so a trace
whose late spans are still parked waits for them. Past `max_parked` the answer is
503 and the exporter retries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from tailbudget.serve.batch import BadBatch
from tailbudget.serve.limits import BodyLimits
from tailbudget.serve.traces import carried
from tailbudget.serve.traces.assembler import Assembler, Limits
from tailbudget.serve.traces.attribute import Attributor
from tailbudget.serve.traces.live_culprits import TraceRow, TraceWindow, culprits
from tailbudget.serve.traces.otlp_body import BadTraces, decode_traces, export_response
from tailbudget.serve.traces.span_log import SpanLog

if TYPE_CHECKING:
    from tailbudget.serve.runtime import Runtime

__all__ = ["TraceOptions", "TraceReceiver"]

# Named as before serve/ left control/: a logging config may filter on it.
log = logging.getLogger("tailbudget.control.traces.receiver")

_BATCH = 5_000
"""Most traces attributed at once (one pass; a smaller batch keeps the peak RSS down)."""
_REWRITE_BYTES = 64 * 1024 * 1024
"""The span log is rewritten to the open traces once it passes this size."""
_BASELINE = "traces_baseline.json"
_CULPRITS_EVERY_S = 1.0
"""`/v1/status` ranks the window's culprits at most this often (a ranking over tens of
thousands of traces costs tens of ms of the interpreter lock ingest needs)."""


@dataclass(frozen=True)
class _Parked:
    """A span record acknowledged but not held: where it is in the span log, when it came."""

    offset: int
    arrived_s: float
    spans: int


@dataclass(frozen=True)
class TraceOptions:
    """`serve --traces` settings."""

    span_stage: Literal["operation", "service"] = "operation"
    limits: Limits = field(default_factory=Limits)
    flush_every_s: float = 1.0
    slices: tuple[tuple[str, str, float], ...] = ()
    """The budget's stage slices: (stage, percentile, ms), for the budget burn."""
    class_by: str | None = None
    """The root span attribute holding a request's class (the budget's `classes.by`)."""


class TraceReceiver:
    """Span log + assembler + attribution + the culprits window, for one runtime."""

    def __init__(self, runtime: Runtime, options: TraceOptions) -> None:
        self.runtime = runtime
        self.options = options
        self.root: Path = runtime.state.root
        self.span_log = SpanLog(self.root, options.class_by)
        self.assembler = Assembler(options.limits)
        self.attributor = Attributor(options.span_stage)
        self.lock = threading.Lock()
        self.window = TraceWindow(runtime.policy.window_s)
        self.baseline = self._load_baseline()
        self.spans_received = 0
        self.spans_rejected: Counter[str] = Counter()
        self.names_folded: Counter[str] = Counter()
        """Span and service names that are not stage names, folded into `other`, by reason."""
        self.traces_completed = 0
        self.traces_unattributed = 0
        self.traces_refused = 0
        """Traces whose attribution raised (times no check caught): refused one by one."""
        self.busy = 0
        """Requests answered 503 because too many spans were parked (the exporter retries)."""
        self.parked: deque[_Parked] = deque()
        self.parked_spans = 0
        self._culprits: tuple[float, object, list[dict[str, Any]]] = (-_CULPRITS_EVERY_S, None, [])
        """When the culprits were last ranked, against which baseline, and the ranking."""
        self.restored_rows = carried.restore(self, self.span_log.carried)
        """Rows of the culprits' window carried across the restart (`carried.py`)."""
        self.recovered = self._recover()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tailbudget-traces", daemon=True)
        self._thread.start()

    def _recover(self) -> int:
        """The open traces' spans from the span log: held up to `max_held`, the rest
        parked (memory stays flat however many a crash left)."""
        now = time.monotonic()
        total = 0
        for offset, n in self.span_log.open_records():
            total += n
            if self.parked or not self.assembler.room(n):
                self.parked.append(_Parked(offset, now, n))
                self.parked_spans += n
            else:
                self.assembler.add(self.span_log.spans_at(offset), now)
        if total:
            log.info("%d spans of open traces from the span log again", total)
        return total

    # --- ingest -----------------------------------------------------------------

    def receive(
        self,
        body: bytes,
        content_type: str | None,
        encoding: str | None,
        limits: BodyLimits | None = None,
    ) -> tuple[bytes, str]:
        """Decode, make durable, hold; the OTLP response body and its media type.

        Raises BadTraces (400/413/415, or 503 while the span log holds `max_parked`
        spans waiting for room) and OSError (not durable)."""
        # A request that will be parked needs no rows now (the span log keeps its protobuf,
        # decoded when read back): checked and counted only. Guessed without the lock:
        # a request decoded without rows is parked even if room was made meanwhile
        # (read back at the next flush), one with rows is parked if the room went.
        park = bool(self.parked) or self.assembler.full
        decoded = decode_traces(
            body, content_type, encoding, limits, rows=not park, class_key=self.options.class_by
        )
        n = decoded.accepted
        with self.lock:
            if n and self.parked_spans >= self.options.limits.max_parked:
                self.busy += 1
                raise BadTraces(
                    f"{self.parked_spans} spans wait for attribution; retry shortly", 503
                )
            # Written and held (or parked) under the lock: a span-log rewrite never misses
            # spans written but not held, and parked records keep their order. Made durable
            # outside it, so the requests in flight share one fsync (group commit) and the
            # flusher is not held up by the disk.
            ticket = 0
            if n:
                if decoded.protobuf is not None:
                    ticket, offset = self.span_log.write_protobuf_at(
                        decoded.protobuf, decoded.received_ns
                    )
                else:
                    ticket, offset = self.span_log.write_spans_at(decoded.spans)
                now = time.monotonic()
                if self.parked or not self.assembler.room(n) or len(decoded.spans) < n:
                    self.parked.append(_Parked(offset, now, n))
                    self.parked_spans += n
                    if decoded.protobuf is None:  # a protobuf's names: as it is read back
                        self.names_folded.update(decoded.folded)
                else:
                    self.assembler.add(decoded.spans, now)
                    self.names_folded.update(decoded.folded)
            self.spans_received += n
            self.spans_rejected.update(decoded.reasons)
        if ticket:
            # Should this fsync fail, the answer is a 503 and the exporter sends the spans
            # again: those already held count once, the copies as duplicates.
            self.span_log.sync(ticket)
        return export_response(content_type, decoded)

    # --- completion ---------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.options.flush_every_s):
            try:
                self.flush(time.monotonic())
            except Exception:  # keep flushing; the span log still holds the spans
                log.exception("attributing completed traces failed")

    def flush(self, now: float) -> int:
        """Attribute every trace due by `now` (monotonic s); returns how many."""
        held = self.options.limits.max_held
        done = 0
        while True:
            self._unpark(held)
            ready = self._take(now, early=False)
            if not ready and self.parked:
                # Every held trace waits on parked spans: hold up to twice as many; only
                # past that (or at the trace limit) are traces completed by the wall
                # clock (late spans counted).
                blocked = self._unpark(2 * held)
                early = blocked or self.assembler.spans_held >= 2 * held
                ready = self._take(now, early=early)
            if not ready:
                break
            done += self._commit(ready)
        if self.span_log.size() > _REWRITE_BYTES:
            with self.lock:
                if not self.parked:  # parked records are read back from the log as is
                    state = {
                        "counts": carried.counts_of(self),
                        "rows": [carried.row_json(r) for r in self.window.rows],
                    }
                    self.span_log.rewrite(
                        (row for t in self.assembler.open.values() for row in t.spans.values()),
                        state,
                    )
        return done

    def _take(self, now: float, *, early: bool) -> list[Any]:
        """Traces due by the arrival time of the oldest parked span (all of theirs that
        came before it are held), or by `now` when nothing is parked or `early`."""
        with self.lock:
            clock = now if early or not self.parked else min(now, self.parked[0].arrived_s)
            ready, stale = self.assembler.take_due(clock, _BATCH)
            counts = carried.counts_of(self) if stale else None
        if stale:
            self.span_log.mark_done(stale, {"counts": counts})
        return ready

    def _unpark(self, most: int) -> bool:
        """Parked records read back from the span log, oldest first, while fewer than
        `most` spans are held and the next record's spans cannot open more than
        `max_traces` traces (read back only as fast as traces complete: a burst is never
        dropped as too_many_traces). True when a record waits on the trace limit."""
        while True:
            with self.lock:
                if not self.parked or self.assembler.spans_held >= most:
                    return False
                head = self.parked[0]
                if not self.assembler.room(head.spans, most):
                    return True
            folded: dict[str, int] = {}
            rows = self.span_log.spans_at(head.offset, folded)  # only this thread unparks
            with self.lock:
                self.names_folded.update(folded)
                self.parked.popleft()
                self.parked_spans -= head.spans
                self.assembler.add(rows, head.arrived_s)

    def _commit(self, ready: list[Any]) -> int:
        """Attribute and log `ready`; a trace that cannot be attributed is refused alone
        (the batch is halved until it stands alone), never taking the others with it."""

        ids = [t.root.trace for t in ready if t.root is not None]
        try:
            result = self.attributor.attribute(ready)
            self.runtime.ingest(result.batch)  # a trace's class: the budget's list bounds it
        except BadBatch as exc:  # too many stage names for the window: counted, not held
            log.error("completed traces not attributed: %s", exc)
            with self.lock:
                self.traces_unattributed += len(ids)
                counts = carried.counts_of(self)
            self.span_log.mark_done(ids, {"counts": counts})
            return 0
        except OSError:
            raise  # not durable: the span log still holds them (attributed at the restart)
        except Exception as exc:
            if len(ready) > 1:
                half = len(ready) // 2
                return self._commit(ready[:half]) + self._commit(ready[half:])
            log.warning("trace %s refused: it cannot be attributed (%r)", ids[:1], exc)
            with self.lock:
                self.traces_refused += len(ids)
                counts = carried.counts_of(self)
            self.span_log.mark_done(ids, {"counts": counts})
            return 0
        arrived = time.time()
        rows: list[dict[str, float]] = [{} for _ in ids]
        for stage, column in result.batch.stages.items():
            for i, ms in zip(column.index.tolist(), column.ms.tolist(), strict=True):
                if ms:  # a stage absent from a row is 0 ms there (live_culprits._matrix)
                    rows[i][stage] = ms
        added = [
            TraceRow(arrived, t, st)
            for t, st in zip(result.batch.total_ms.tolist(), rows, strict=True)
        ]
        with self.lock:
            self.traces_completed += len(ids)
            for row in added:
                self.window.add(row)
            counts = carried.counts_of(self)
        # The counts and the window's new rows are made durable with the ids (one fsync):
        # after kill -9 they come back as they were when these traces were done.
        self.span_log.mark_done(
            ids, {"counts": counts, "rows": [carried.row_json(r) for r in added]}
        )
        return len(ids)

    # --- views ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """`traces` and `culprits` of GET /v1/status."""
        now = time.time()
        with self.lock:
            a = self.assembler
            incomplete = dict(a.incomplete)
            if self.traces_unattributed:
                incomplete["too_many_stages"] = self.traces_unattributed
            if self.traces_refused:
                incomplete["not_attributable"] = self.traces_refused
            traces = {
                "received": self.traces_completed + sum(incomplete.values()) + len(a.open),
                "completed": self.traces_completed,
                "open": len(a.open),
                "incomplete": incomplete,
                "spans": {
                    "received": self.spans_received,
                    "held": a.spans_held,
                    "parked": self.parked_spans,
                    "rejected": dict(self.spans_rejected),
                    "names_folded": dict(self.names_folded),
                    "dropped": dict(a.dropped),
                },
                "span_stage": self.options.span_stage,
                "grace_s": self.options.limits.grace_s,
                "recovered_spans": self.recovered,
                "restored_window_rows": self.restored_rows,
                "busy_responses": self.busy,
            }
            rows = self.window.current(now)
            baseline = list(self.baseline)
        traces["in_window"] = len(rows)
        traces["baseline_traces"] = len(baseline)
        return {"traces": traces, "culprits": self._ranked(rows, baseline)}

    def _ranked(self, rows: list[TraceRow], baseline: list[TraceRow]) -> list[dict[str, Any]]:
        at, against, ranking = self._culprits
        now = time.monotonic()
        if now - at >= _CULPRITS_EVERY_S or against is not self.baseline:
            ranking = culprits(rows, baseline)
            self._culprits = (now, self.baseline, ranking)
        return ranking

    def budget_burn(self) -> list[tuple[str, str, float]]:
        """(stage, quantile, window percentile / its slice) for each budgeted stage seen."""
        if not self.options.slices:
            return []
        rt = self.runtime
        with rt.lock:
            stats = rt.stage_windows.stats(
                time.time(), min_samples=rt.policy.min_samples, confidence=rt.policy.confidence
            )
        out = []
        for stage, pct, ms in self.options.slices:
            measured = getattr(stats.get(stage), pct, None)
            if measured is not None and ms > 0:
                out.append((stage, "0." + pct[1:], float(measured) / ms))
        return out

    def set_baseline(self) -> int:
        """The current window becomes the baseline culprits' growth is measured against."""
        with self.lock:
            rows = self.window.current(time.time())
            self.baseline = rows
        data = orjson.dumps([[r.t_s, r.total_ms, r.stages] for r in rows])
        tmp = self.root / (_BASELINE + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(self.root / _BASELINE)
        return len(rows)

    def _load_baseline(self) -> list[TraceRow]:
        try:
            raw = orjson.loads((self.root / _BASELINE).read_bytes())
            return [TraceRow(float(t), float(total), dict(st)) for t, total, st in raw]
        except (OSError, orjson.JSONDecodeError, TypeError, ValueError):
            return []

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30.0)
        self.span_log.close()
