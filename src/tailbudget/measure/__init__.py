"""Measure: per-request, per-stage timing cheap enough to leave on.

`Recorder` hands finished requests to a background writer that feeds sinks
(Parquet, JSONL, Prometheus, OpenTelemetry, rolling sketches). Optional
integrations (`otel`, `asgi`) are imported from their own modules.
"""

from tailbudget.measure.deadline import (
    DEADLINE_HEADER,
    outgoing_headers,
    parse_deadline,
    propagate_deadline,
    propagate_deadline_async,
)
from tailbudget.measure.gate import ADMIT, Admission, Gate
from tailbudget.measure.prometheus import PrometheusSink, budget_buckets
from tailbudget.measure.record import Record
from tailbudget.measure.recorder import Recorder, make_sink
from tailbudget.measure.request import Request, StageTimer, current_request
from tailbudget.measure.sinks import JsonlSink, ParquetSink, Sink
from tailbudget.measure.stream import StreamTimer

__all__ = [
    "ADMIT",
    "DEADLINE_HEADER",
    "Admission",
    "Gate",
    "JsonlSink",
    "ParquetSink",
    "PrometheusSink",
    "Record",
    "Recorder",
    "Request",
    "Sink",
    "StageTimer",
    "StreamTimer",
    "budget_buckets",
    "current_request",
    "make_sink",
    "outgoing_headers",
    "parse_deadline",
    "propagate_deadline",
    "propagate_deadline_async",
]
