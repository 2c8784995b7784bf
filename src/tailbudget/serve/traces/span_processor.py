"""`BudgetSpanProcessor`: stage times from an app's own OpenTelemetry spans, into a Recorder.

For services already auto-instrumented with OpenTelemetry: no `with` blocks in
the app. `on_end` only files the finished span under its trace (a lock and a
dict insert, as cheap as the SDK's BatchSpanProcessor queueing it); a
background thread takes each local trace once its local root ended (plus a short
grace for asynchronous children), attributes it on the critical path by the
audit's own code (`serve.traces.attribute`, as `serve --traces` does) and
hands the Recorder one record per trace: the root's duration and each stage's
critical-path ms. A root is a span without a parent or with a remote one.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Literal

from tailbudget.logs.span_model import SpanRow
from tailbudget.measure.recorder import Recorder
from tailbudget.serve.traces.assembler import Assembler, Limits
from tailbudget.serve.traces.attribute import Attributor

__all__ = ["BudgetSpanProcessor"]

# Named as before serve/ left control/: a logging config may filter on it.
log = logging.getLogger("tailbudget.control.traces.span_processor")

_FAR = float("inf")


class BudgetSpanProcessor:
    """An OpenTelemetry `SpanProcessor` (duck-typed: the SDK calls these five methods)."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        span_stage: Literal["operation", "service"] = "operation",
        grace_s: float = 0.5,
        flush_every_s: float = 0.5,
        max_traces: int = 20_000,
        max_spans: int = 5_000,
    ) -> None:
        self.recorder = recorder
        classes = recorder.budget.class_set if recorder.budget is not None else None
        self.class_key = classes.by if classes is not None else None
        """The root span attribute holding a request's class (the budget's `classes.by`):
        recorded as the request's field of that name, which PrometheusSink labels by."""
        self.attributor = Attributor(span_stage)
        self.assembler = Assembler(
            Limits(
                grace_s=grace_s,
                timeout_s=max(60.0, 10 * grace_s),
                max_traces=max_traces,
                max_spans=max_spans,
            )
        )
        self.lock = threading.Lock()
        self.flush_every_s = flush_every_s
        self.traces_recorded = 0
        self._stop = threading.Event()
        self._flush_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name="tailbudget-span-processor", daemon=True
        )
        self._thread.start()

    # --- the SDK's SpanProcessor interface -----------------------------------------

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def _on_ending(self, span: Any) -> None:
        return None

    def on_end(self, span: Any) -> None:
        ctx = span.context
        parent = span.parent
        status = span.status
        resource = span.resource
        root = parent is None or parent.is_remote
        key, attrs = self.class_key, span.attributes
        label = attrs.get(key) if key and root and attrs else None
        row = SpanRow(
            format(ctx.trace_id, "032x"),
            format(ctx.span_id, "016x"),
            "" if parent is None or parent.is_remote else format(parent.span_id, "016x"),
            span.name,
            str(resource.attributes.get("service.name", "unknown")) if resource else "unknown",
            span.start_time or 0,
            span.end_time or 0,
            status is not None and status.status_code.value == 2,
            str(span.kind.value + 1),  # the SDK's SpanKind counts from 0, OTLP's from 1
            "" if label is None else str(label),
        )
        with self.lock:
            self.assembler.add([row], time.monotonic())

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30.0)
        self._flush(_FAR)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self._flush(_FAR)
        self.recorder.flush(timeout_millis / 1000.0)
        return True

    # --- off the request path ----------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.flush_every_s):
            try:
                self._flush(time.monotonic())
            except Exception:
                log.exception("tailbudget: attributing finished traces failed")

    def _flush(self, now: float) -> None:
        with self._flush_lock:
            with self.lock:
                ready, _ = self.assembler.take_due(now, 1 << 30)
            if not ready:
                return
            result = self.attributor.attribute(ready)
            batch = result.batch
            stages: list[list[Any]] = [[] for _ in result.traces]
            for name, column in batch.stages.items():
                for i, ms in zip(column.index.tolist(), column.ms.tolist(), strict=True):
                    stages[i].append((name, ms))
            to_perf = time.perf_counter_ns() - time.time_ns()
            for i, trace in enumerate(result.traces):
                start = int(batch.ts[i] * 1e9) + to_perf
                end = start + int(batch.total_ms[i] * 1e6)
                flat: list[Any] = []
                for name, ms in stages[i]:
                    flat += [name, start, min(start + int(ms * 1e6), end)]
                error = "SpanError" if bool(batch.error[i]) else None
                label = batch.labels[i] if batch.labels is not None else None
                fields = {self.class_key: label} if self.class_key and label else None
                if self.recorder.put(trace, start, end, tuple(flat), error, fields):
                    self.traces_recorded += 1
