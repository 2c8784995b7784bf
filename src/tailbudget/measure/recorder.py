"""`Recorder`: per-request, per-stage timing with sinks fed off the request path."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailbudget.budget import load_budget
from tailbudget.errors import TailbudgetError
from tailbudget.measure.otel import OTelSink
from tailbudget.measure.prometheus import PrometheusSink, dropped_counter
from tailbudget.measure.request import Request
from tailbudget.measure.sinks.base import Pump, Sink
from tailbudget.measure.sinks.jsonl import JsonlSink
from tailbudget.measure.sinks.parquet import ParquetSink
from tailbudget.measure.sinks.sketch import SketchSink, WindowSnapshot

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from tailbudget.budget import Budget

log = logging.getLogger("tailbudget.measure")
_new = object.__new__

SinkSpec = str | Path | Sink


def make_sink(spec: SinkSpec) -> Sink:
    """A sink from a path (`.parquet`, `.jsonl`), a name (`prometheus`, `otel`) or itself."""
    if isinstance(spec, Sink):
        return spec
    if isinstance(spec, str | Path):
        text = str(spec)
        lower = text.lower()
        if lower.endswith(".parquet"):
            return ParquetSink(text)
        if lower.endswith((".jsonl", ".ndjson")):
            return JsonlSink(text)
        if lower == "prometheus":
            return PrometheusSink()
        if lower in ("otel", "opentelemetry"):
            return OTelSink()
    raise TailbudgetError(
        f"unknown sink {spec!r}: give a path ending in .parquet or .jsonl, "
        "'prometheus', 'otel', or a Sink object"
    )


def _stage_need(budget: Budget) -> dict[str, float]:
    need: dict[str, float] = {}
    for _, stage in budget.stages():
        ms: float | None = None
        if stage.budget is not None:
            given = stage.budget.given()
            ms = given.get("p95") or given.get("p99") or given.get("p50")
        if ms is None and stage.llm is not None:
            ms = stage.llm.total_ms
        if ms is not None:
            need[stage.name] = ms
    return need


def _slo_deadline(budget: Budget) -> float:
    return max(budget.objectives.e2e().values())


class Recorder:
    """Records every request and its stages; sinks are fed by a background thread.

    `sink`: a path (`.parquet` / `.jsonl`), `"prometheus"`, `"otel"`, a `Sink`
    object, or a list of them. With no sink, rolling sketches are kept for the
    controller (`rec.snapshot()`). `budget` (a `Budget` or a path) gives the
    default deadline (the largest SLO percentile), the stage budgets
    `can_afford` compares with, and histogram buckets. `batch_size` is kept
    small on purpose: the writer's per-row objects then die young, which keeps
    the cyclic GC (and so the request threads) from paying for them.
    """

    def __init__(
        self,
        sink: SinkSpec | Sequence[SinkSpec] | None = None,
        budget: Budget | str | Path | None = None,
        *,
        service: str | None = None,
        deadline_ms: float | None = None,
        capacity: int = 100_000,
        batch_size: int = 256,
        flush_interval_s: float = 0.25,
        window_s: float = 60.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if isinstance(budget, str | Path):
            budget = load_budget(budget)
        self.budget: Budget | None = budget
        self.service = service or (budget.service if budget is not None else "service")
        _check_sizes(capacity, batch_size, flush_interval_s, deadline_ms)
        self.deadline_ms = (
            deadline_ms
            if deadline_ms is not None
            else (_slo_deadline(budget) if budget is not None else None)
        )
        self._need = _stage_need(budget) if budget is not None else {}
        sinks = _make_sinks(sink)
        self.sketches: SketchSink | None = None
        if not sinks:  # no sink given: rolling sketches, readable in-process
            self.sketches = SketchSink(window_s=window_s)
            sinks = [self.sketches]
        for s in sinks:
            s.bind(self.service, budget)
        self.sinks: list[Sink] = sinks
        self.id_prefix = os.urandom(3).hex() + "-"
        self._seq = itertools.count()
        self._drop_lock = threading.Lock()
        self._dropped: dict[str, int] = {}

        self.registry = registry
        self._dropped_metric = dropped_counter(registry)
        self._sink_label = "+".join(s.name for s in sinks)
        self._pump = Pump(
            sinks,
            capacity=capacity,
            batch_size=batch_size,
            flush_interval_s=flush_interval_s,
            id_prefix=self.id_prefix,
            on_drop=self._on_drop,
        )
        # Request.__exit__ appends to the pump's queue itself (no call per request).
        self._queue = self._pump.queue
        self._capacity = capacity
        self._wake_at = batch_size
        self._wake = self._pump.wake
        self._closed = False
        atexit.register(self.close)

    # hot path ----------------------------------------------------------------
    def request(
        self,
        *,
        request_id: str | None = None,
        deadline_ms: float | None = None,
        **fields: Any,
    ) -> Request:
        """A request context: `with rec.request(route="chat", seq_len=812) as req:`.

        Keywords are covariates and cohorts, written as plain columns.
        `deadline_ms` (e.g. from an incoming header) tightens the budget's deadline.
        """
        deadline = self.deadline_ms
        if deadline_ms is not None and (deadline is None or deadline_ms < deadline):
            deadline = deadline_ms
        # Slots filled here rather than in __init__: one Python frame less per request.
        req = _new(Request)
        req._rec = self
        req.request_id = next(self._seq) if request_id is None else request_id
        req.fields = fields
        req.deadline_ms = deadline
        req._done = []
        req._extra = None
        req._top = None
        return req

    def put(
        self,
        request_id: str,
        start_ns: int,
        end_ns: int,
        stages: tuple[Any, ...],
        error: str | None = None,
        fields: dict[str, Any] | None = None,
    ) -> bool:
        """Record a request timed elsewhere (perf_counter_ns stamps; `stages` flat as
        name, t0, t1, ...), e.g. from OpenTelemetry spans; False when refused (counted)."""
        q = self._queue
        n = len(q)
        if n >= self._capacity:
            self._refused()
            return False
        q.append((request_id, start_ns, end_ns, stages, error, fields or {}, None))
        if n == self._wake_at:
            self._wake()
        return True

    def _refused(self) -> None:
        """The queue did not take a record (called by Request on the rare path)."""
        self._on_drop("closed" if self._closed else "queue_full", 1)

    def _stage_need_ms(self, stage: str) -> float | None:
        need = self._need.get(stage)
        if need is None and "/" in stage:
            need = self._need.get(stage.rsplit("/", 1)[1])
        return need

    # drops, flush, close ------------------------------------------------------
    def _on_drop(self, reason: str, n: int) -> None:
        if n <= 0:
            return
        with self._drop_lock:
            self._dropped[reason] = self._dropped.get(reason, 0) + n
        try:
            self._dropped_metric.labels(sink=self._sink_label).inc(n)
        except Exception:
            log.exception("tailbudget: could not count dropped records")

    @property
    def dropped(self) -> int:
        """Records that did not reach every sink (queue full, closed, a sink failed)."""
        with self._drop_lock:
            return sum(self._dropped.values())

    @property
    def dropped_by_reason(self) -> dict[str, int]:
        """Dropped records by reason: queue_full, closed, close, resolve, or a sink name."""
        with self._drop_lock:
            return dict(self._dropped)

    def snapshot(self) -> WindowSnapshot:
        """Rolling-window count, errors, p50/p95/p99 (ms) when recording without a sink."""
        if self.sketches is None:
            raise TailbudgetError("snapshot() needs Recorder() with no sink (rolling sketches)")
        self.flush()
        return self.sketches.snapshot()

    @property
    def written(self) -> int:
        """Records handed to the sinks so far."""
        return self._pump.written

    def flush(self, timeout_s: float = 10.0) -> None:
        """Block until queued records reached the sinks and the sinks flushed."""
        if not self._closed:
            self._pump.flush(timeout_s)

    def close(self) -> None:
        """Flush everything and stop the writer (also runs at interpreter exit)."""
        if self._closed:
            return
        self._closed = True
        self._capacity = 0  # requests still running are refused (and counted) from now on
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        self._pump.close()
        if self.dropped:
            log.warning(
                "tailbudget: %d records dropped (%s); raise capacity or add a faster sink",
                self.dropped,
                ", ".join(f"{k}={v}" for k, v in sorted(self.dropped_by_reason.items())),
            )

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_sizes(
    capacity: int, batch_size: int, flush_interval_s: float, deadline_ms: float | None
) -> None:
    if capacity < 1 or batch_size < 1:
        raise TailbudgetError(
            f"capacity and batch_size must be >= 1, got {capacity} and {batch_size}"
        )
    if flush_interval_s <= 0:
        raise TailbudgetError(f"flush_interval_s must be > 0, got {flush_interval_s}")
    if deadline_ms is not None and deadline_ms <= 0:
        raise TailbudgetError(f"deadline_ms must be > 0, got {deadline_ms}")


def _make_sinks(sink: SinkSpec | Sequence[SinkSpec] | None) -> list[Sink]:
    if sink is None:
        return []
    if isinstance(sink, str | Path | Sink):
        return [make_sink(sink)]
    return [make_sink(s) for s in sink]
