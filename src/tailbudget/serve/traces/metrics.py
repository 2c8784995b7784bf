"""`/metrics` for `serve --traces`: traces and spans by outcome, and each stage's budget burn.

Each stage's critical-path percentiles are the stage windows' own series
(`tailbudget_stage_window_quantile`), fed by the completed traces."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from tailbudget.serve.traces.receiver import TraceReceiver

__all__ = ["TracesCollector"]


class TracesCollector(Collector):
    """Reads the receiver's counters at scrape time."""

    def __init__(self, receiver: TraceReceiver) -> None:
        self.receiver = receiver

    def collect(self) -> Iterator[Metric]:
        r = self.receiver
        with r.lock:
            a = r.assembler
            completed = r.traces_completed
            incomplete = dict(a.incomplete)
            if r.traces_unattributed:
                incomplete["too_many_stages"] = r.traces_unattributed
            if r.traces_refused:
                incomplete["not_attributable"] = r.traces_refused
            folded = dict(r.names_folded)
            dropped = dict(a.dropped)
            rejected = dict(r.spans_rejected)
            spans = r.spans_received
            open_traces = len(a.open)
            held, parked = a.spans_held, r.parked_spans
        yield CounterMetricFamily(
            "tailbudget_traces_completed", "Traces attributed on the critical path.", completed
        )
        inc = CounterMetricFamily(
            "tailbudget_traces_incomplete",
            "Traces given up (no_root, root_not_ended, not_attributable, too_many_stages) "
            "and orphan spans, by reason.",
            labels=["reason"],
        )
        for reason, n in sorted(incomplete.items()):
            inc.add_metric([reason], float(n))
        yield inc
        yield CounterMetricFamily(
            "tailbudget_spans_received", "Spans accepted (durably) by POST /v1/traces.", spans
        )
        lost = CounterMetricFamily(
            "tailbudget_spans_dropped",
            "Spans rejected or not held, by reason (no_end, duplicate, late, too_many_*).",
            labels=["reason"],
        )
        for reason, n in sorted({**rejected, **dropped}.items()):
            lost.add_metric([reason], float(n))
        yield lost
        names = CounterMetricFamily(
            "tailbudget_span_names_folded",
            "Span or service names that are not stage names (too_long, control_character), "
            "taken as the stage `other`.",
            labels=["reason"],
        )
        for reason, n in sorted(folded.items()):
            names.add_metric([reason], float(n))
        yield names
        yield GaugeMetricFamily(
            "tailbudget_traces_open", "Traces held, not yet complete.", open_traces
        )
        waiting = GaugeMetricFamily(
            "tailbudget_spans_pending",
            "Acknowledged spans not yet attributed: held in memory, or parked in the span log.",
            labels=["where"],
        )
        waiting.add_metric(["held"], float(held))
        waiting.add_metric(["parked"], float(parked))
        yield waiting
        burn = GaugeMetricFamily(
            "tailbudget_stage_budget_burn",
            "Each stage's window percentile over its budget slice (1 = the whole slice).",
            labels=["stage", "quantile"],
        )
        for stage, quantile, share in r.budget_burn():
            burn.add_metric([stage, quantile], share)
        yield burn
