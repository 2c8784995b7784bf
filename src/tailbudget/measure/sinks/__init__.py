"""Where records go: JSONL, Parquet (and, in sibling modules, Prometheus, OTel, sketches)."""

from tailbudget.measure.sinks.base import Batch, Pump, Sink
from tailbudget.measure.sinks.jsonl import JsonlSink
from tailbudget.measure.sinks.parquet import ParquetSink

__all__ = ["Batch", "JsonlSink", "ParquetSink", "Pump", "Sink"]
