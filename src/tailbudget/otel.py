"""OpenTelemetry in-process: `BudgetSpanProcessor` records each finished local trace's
stage times (critical path) into a `Recorder`; see control/traces/span_processor.py."""

from tailbudget.control.traces.span_processor import BudgetSpanProcessor

__all__ = ["BudgetSpanProcessor"]
