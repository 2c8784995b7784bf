"""What `serve --traces` carries across a restart besides the open traces' spans: its
counts and the culprits' evidence (the window's per-trace critical-path rows).

Both ride in the span log (`span_log._DONE_STATE`): the record that marks a batch of
traces done also holds the counts after it and the rows it added to the window, so
one fsync makes the three durable together. After kill -9 the restart reads them back
(`SpanLog.carried`): `completed` and the rest go on from where they were, and the
window's rows - those still inside the policy's window - rank the same culprits, so the
verdict and `/v1/status` read as before the crash.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from tailbudget.serve.traces.live_culprits import TraceRow

if TYPE_CHECKING:
    from tailbudget.serve.traces.receiver import TraceReceiver

__all__ = ["counts_of", "restore", "row_json"]

_SCALARS = ("traces_completed", "traces_unattributed", "traces_refused", "spans_received", "busy")
_COUNTERS = ("spans_rejected", "names_folded")
_ASSEMBLER = ("dropped", "incomplete")


def counts_of(r: TraceReceiver) -> dict[str, Any]:
    """The receiver's counts as JSON (the caller holds its lock)."""
    out: dict[str, Any] = {name: getattr(r, name) for name in _SCALARS}
    for name in _COUNTERS:
        out[name] = dict(getattr(r, name))
    for name in _ASSEMBLER:
        out[name] = dict(getattr(r.assembler, name))
    return out


def row_json(row: TraceRow) -> list[Any]:
    return [row.t_s, row.total_ms, row.stages]


def restore(r: TraceReceiver, carried: dict[str, Any]) -> int:
    """Counts and window rows from the span log into a new receiver; the rows restored.
    A malformed entry is skipped (they are a report: never a reason not to start)."""
    counts = carried.get("counts") or {}
    for name in _SCALARS:
        value = counts.get(name)
        if isinstance(value, int) and value >= 0:
            setattr(r, name, value)
    for holder, names in ((r, _COUNTERS), (r.assembler, _ASSEMBLER)):
        for name in names:
            getattr(holder, name).update(_counter(counts.get(name)))
    restored = 0
    for row in carried.get("rows") or []:
        try:
            t_s, total, stages = row
            r.window.add(
                TraceRow(float(t_s), float(total), {str(k): float(v) for k, v in stages.items()})
            )
        except (TypeError, ValueError, AttributeError):
            continue
        restored += 1
    return restored


def _counter(value: Any) -> Counter[str]:
    if not isinstance(value, dict):
        return Counter()
    return Counter({str(k): v for k, v in value.items() if isinstance(v, int) and v >= 0})
