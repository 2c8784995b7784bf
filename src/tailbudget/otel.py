"""OpenTelemetry in-process: `BudgetSpanProcessor` records each finished local trace's
stage times (critical path) into a `Recorder`; see serve/traces/span_processor.py."""

from tailbudget.serve.traces.span_processor import BudgetSpanProcessor

__all__ = ["BudgetSpanProcessor"]
