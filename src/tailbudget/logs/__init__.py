"""Reading latency logs into one canonical Ibis table (DuckDB by default)."""

from tailbudget.logs.options import ReadOptions
from tailbudget.logs.read import detect_format, read_log
from tailbudget.logs.table import LogTable, RowCounts

__all__ = ["LogTable", "ReadOptions", "RowCounts", "detect_format", "read_log"]
