"""Whether a log's latency unit is known, and the check that refuses to guess it.

A tabular log whose latency column is named `total` or `Latency` says nothing
about its unit; tailbudget reads it as milliseconds. Read as ms, a log in
seconds is a service answering in about one millisecond: every SLO passes and
a gate waves it through. So when the unit is only assumed and the figures
look like seconds, the audit stops and asks for the unit instead of gating.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tailbudget.errors import LogError

if TYPE_CHECKING:
    from tailbudget.logs.table import LogTable

__all__ = [
    "OWN_UNITS",
    "SECONDS_MAX",
    "SECONDS_P99",
    "check_log_unit",
    "check_unit",
    "looks_like_seconds",
    "names_unit",
    "seconds_hint",
]

SECONDS_P99 = 30.0
"""A p99 under this many "ms" (a 30 s answer when in seconds) may be seconds."""
SECONDS_MAX = 120.0
"""...and so may a slowest request under this many (two minutes when in seconds)."""

_MS_SUFFIXES = ("_ms", "_msec", "_millis")

OWN_UNITS = frozenset(
    {"spans", "otlp", "jaeger", "vllm", "llmperf", "aiperf", "guidellm", "sglang"}
)
"""Formats that define their latency units (a span's duration, a benchmark's seconds)."""


def names_unit(column: str) -> bool:
    """True when a column's name says it holds milliseconds, the unit it is read in.

    `latency_s` names a unit too, but not the one an unstated unit is read in.
    """
    return column.lower().endswith(_MS_SUFFIXES)


def unit_stated(unit: str | None, total: str | None, stages: Iterable[str]) -> bool:
    """True when the reader need not guess the unit: given, or named by every latency column."""
    if unit is not None:
        return True
    columns = [total] if total is not None else list(stages)
    return bool(columns) and all(names_unit(c) for c in columns)


def looks_like_seconds(p50: float, p99: float, maximum: float) -> bool:
    """A whole distribution within a few "ms" (slowest under two minutes as seconds)."""
    return 0.0 < p99 < SECONDS_P99 and 0.0 < maximum < SECONDS_MAX and p50 <= p99


def check_unit(stated: bool, p50: float, p99: float, maximum: float) -> None:
    """Raise when the unit was assumed and the figures look like seconds.

    A verdict from a guessed unit would gate a log in seconds as a 1 ms service;
    stating the unit (ms too: a fast service in ms is fine) lets it through.
    """
    if stated or not looks_like_seconds(p50, p99, maximum):
        return
    raise LogError(
        f"unit: the latencies look like seconds, not milliseconds (p50 {p50:.3g}, "
        f"p99 {p99:.3g}, max {maximum:.3g}) and the log does not say which; state it: "
        "s if they are seconds, ms if they really are milliseconds",
        param="unit",
    )


def check_log_unit(log: LogTable) -> LogTable:
    """`check_unit` on a read log's successful requests, for the commands that read a log
    without auditing it (init --from, rebudget, replay, simulate, capacity): one check,
    so a log the audit refuses is not a 1 ms budget, replay or simulation elsewhere.

    Logs whose reader knows the unit (benchmark formats, span tables, a stated unit) are
    passed through without a query.
    """
    if log.unit_stated:
        return log
    t = log.table
    ok = t.filter(~t.error.fill_null(False) & t.total_ms.notnull())
    col = ok.total_ms
    row = ok.aggregate(
        n=col.count(),
        p50=col.quantile(0.5),
        p99=col.quantile(0.99),
        top=col.max(),
    ).to_pyarrow()
    figures = row.to_pylist()[0]
    if not figures["n"]:
        return log
    check_unit(False, float(figures["p50"]), float(figures["p99"]), float(figures["top"]))
    return log


def seconds_hint(log: LogTable) -> str | None:
    """'latencies look like seconds, not ms (p50 .., p99 .., max ..)' for a read log whose
    format does not define its unit and whose figures look like seconds, even where a
    column's name says ms (a log in seconds has carried `total_ms`); None otherwise. The
    gates refuse on it (`--fail-on-*`, exit 2 naming --unit); `init --from` warns."""
    if log.format in OWN_UNITS:
        return None
    t = log.table
    ok = t.filter(~t.error.fill_null(False) & t.total_ms.notnull())
    col = ok.total_ms
    row = ok.aggregate(
        n=col.count(), p50=col.quantile(0.5), p99=col.quantile(0.99), top=col.max()
    ).to_pyarrow()
    got = row.to_pylist()[0]
    if not got["n"]:
        return None
    p50, p99, top = float(got["p50"]), float(got["p99"]), float(got["top"])
    if not looks_like_seconds(p50, p99, top):
        return None
    return f"latencies look like seconds, not ms (p50 {p50:.3g}, p99 {p99:.3g}, max {top:.3g})"
