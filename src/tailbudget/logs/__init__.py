"""Reading latency logs into one canonical Ibis table (DuckDB by default)."""

from tailbudget.logs.table import LogTable, RowCounts

__all__ = ["LogTable", "RowCounts"]
