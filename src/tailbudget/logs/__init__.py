"""Reading latency logs into one canonical Ibis table (DuckDB by default)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailbudget.logs.options import ReadOptions
    from tailbudget.logs.read import detect_format, read_log
    from tailbudget.logs.table import LogTable, RowCounts

__all__ = ["LogTable", "ReadOptions", "RowCounts", "detect_format", "read_log"]

_LAZY = {
    "ReadOptions": "tailbudget.logs.options",
    "detect_format": "tailbudget.logs.read",
    "read_log": "tailbudget.logs.read",
    "LogTable": "tailbudget.logs.table",
    "RowCounts": "tailbudget.logs.table",
}
"""Imported on first use, a start-up guard: the span model (`logs.span_model`), which the
OTLP receiver and an app's `BudgetSpanProcessor` import, loads no Ibis or DuckDB."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tailbudget.logs' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
