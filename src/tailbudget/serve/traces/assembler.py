"""Spans held per trace, with bounded memory, until the trace completes.

A trace completes `grace_s` after its root span arrives (late children of a
finished root still come in); one whose root never comes (or never ended) is
given up `timeout_s` after its first span and counted incomplete by reason.
At most `max_traces` traces are open and `max_spans` spans held per trace;
what does not fit is dropped and counted, never silently.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from tailbudget.logs.span_model import SpanRow

__all__ = ["Assembler", "Limits", "OpenTrace"]


@dataclass(frozen=True)
class Limits:
    """How long and how much the assembler holds."""

    grace_s: float = 10.0
    timeout_s: float = 120.0
    max_traces: int = 50_000
    max_spans: int = 5_000
    recent: int = 200_000
    """Completed trace ids remembered, so a late span is counted, not a new trace."""
    max_held: int = 100_000
    """Spans held in memory in all (waiting for their trace or for attribution); past it
    the receiver leaves acknowledged spans in the span log (parked) and reads them back
    as attribution makes room: memory stays flat under any load."""
    max_parked: int = 5_000_000
    """Spans parked in the span log at most; past it the receiver answers 503 and the
    exporters retry (the disk, too, is bounded)."""


@dataclass
class OpenTrace:
    """One trace's spans so far."""

    first_s: float
    spans: dict[str, SpanRow] = field(default_factory=dict)
    root: SpanRow | None = None
    due_s: float | None = None


class Assembler:
    """Not thread-safe: the receiver calls it under its lock."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open: dict[str, OpenTrace] = {}
        self.dropped: Counter[str] = Counter()
        """Spans not held, by reason (duplicate, late, too_many_traces, too_many_spans)."""
        self.incomplete: Counter[str] = Counter()
        """Traces given up, by reason (no_root, root_not_ended), and orphan spans."""
        self._done: OrderedDict[str, None] = OrderedDict()
        self.spans_held = 0

    @property
    def full(self) -> bool:
        """Holding `max_held` spans or `max_traces` traces: take no more until attribution
        catches up."""
        return self.spans_held >= self.limits.max_held or len(self.open) >= self.limits.max_traces

    def room(self, spans: int, most: int | None = None) -> bool:
        """Whether `spans` more spans can be held with no trace dropped as too_many_traces
        (each might open a trace) and under `most` spans held (default `max_held`)."""
        held = self.limits.max_held if most is None else most
        # An empty assembler takes any record: a record of more spans than max_traces
        # would otherwise wait forever (then only its spans past the limit are dropped).
        traces = not self.open or len(self.open) + spans <= self.limits.max_traces
        return self.spans_held < held and traces

    def add(self, rows: list[SpanRow], now_s: float) -> None:
        for row in rows:
            trace = self.open.get(row.trace)
            if trace is None:
                if row.trace in self._done:
                    self.dropped["late"] += 1
                    continue
                if len(self.open) >= self.limits.max_traces:
                    self.dropped["too_many_traces"] += 1
                    continue
                trace = self.open[row.trace] = OpenTrace(first_s=now_s)
            if row.span in trace.spans:
                self.dropped["duplicate"] += 1
                continue
            if len(trace.spans) >= self.limits.max_spans:
                self.dropped["too_many_spans"] += 1
                continue
            trace.spans[row.span] = row
            self.spans_held += 1
            if not row.parent and trace.root is None:
                trace.root = row
                if row.end_ns >= row.start_ns and row.end_ns > 0:
                    trace.due_s = now_s + self.limits.grace_s

    def take_due(self, now_s: float, limit: int) -> tuple[list[OpenTrace], list[str]]:
        """Complete traces ready for attribution (at most `limit`), and the ids of the
        stale ones given up."""
        ready: list[str] = []
        stale: list[str] = []
        for key, trace in self.open.items():
            if trace.due_s is not None and trace.due_s <= now_s:
                ready.append(key)
                if len(ready) >= limit:
                    break
            elif trace.due_s is None and trace.first_s + self.limits.timeout_s <= now_s:
                stale.append(key)
        for key in stale:
            trace = self.open.pop(key)
            self.spans_held -= len(trace.spans)
            self.incomplete["root_not_ended" if trace.root is not None else "no_root"] += 1
            self._remember(key)
        out = []
        for key in ready:
            trace = self.open.pop(key)
            self.spans_held -= len(trace.spans)
            spans = trace.spans
            orphans = sum(1 for s in spans.values() if s.parent and s.parent not in spans)
            if orphans:
                self.incomplete["orphan_spans"] += orphans
            self._remember(key)
            out.append(trace)
        return out, stale

    def _remember(self, key: str) -> None:
        self._done[key] = None
        while len(self._done) > self.limits.recent:
            self._done.popitem(last=False)
