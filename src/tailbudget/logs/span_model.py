"""One span model, as OpenTelemetry has one ReadableSpan: a row type, its Arrow schema and
the normalisation the critical path reads.

Every span decoder yields a `SpanRow`: the OTLP protobuf and JSON bodies `serve --traces`
receives (`serve.traces.otlp_body`, `serve.traces.otlp_json`), an app's own spans
(`BudgetSpanProcessor`) and the OTLP and Jaeger trace files `read` takes (`logs.traces`,
`logs.jaeger`: a row, with what only a file holds beside it, `logs.trace_rows`). `SPAN_SCHEMA`
is the row as Arrow, and `normalise()` makes rows the span table (`SPAN_TABLE`) that the
critical path, the stage choice and the span reader's roll-up read: one live batch at a
time, or a trace file a chunk at a time on one clock (`epoch_ns`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "ROOT_PARENTS",
    "SPAN_ROW",
    "SPAN_SCHEMA",
    "SPAN_TABLE",
    "SpanRow",
    "epoch_ms_per_unit",
    "normalise",
]

ROOT_PARENTS = ("", "root", "0", "00000000", "0000000000000000", "null", "none")
"""Parent ids that mark a root span (lower case), besides none at all."""


class SpanRow(NamedTuple):
    """One span (ids as lower-case hex; times in ns since the epoch)."""

    trace: str
    span: str
    parent: str
    name: str
    service: str
    start_ns: int
    end_ns: int
    error: bool
    kind: str
    label: str = ""
    """A root span's class: its attribute named by the budget's `classes.by` ("" when the
    span has none, is not a root, or no class attribute is asked for)."""


SPAN_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_id", pa.string()),
        ("name", pa.string()),
        ("service", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("error", pa.bool_()),
        ("kind", pa.string()),
        ("label", pa.string()),
    ]
)
"""`SpanRow` as Arrow: its fields, in order, the ids named `trace_id`, `span_id` and
`parent_id`."""

SPAN_ROW = pa.struct(SPAN_SCHEMA)
"""`SPAN_SCHEMA` as one struct type: rows convert once, not once a column."""


SPAN_TABLE = pa.schema(
    [
        ("trace", pa.string()),
        ("span", pa.string()),
        ("parent", pa.string()),
        ("stage_raw", pa.string()),
        ("service", pa.string()),
        ("kind", pa.string()),
        ("follows", pa.bool_()),
        ("start_ms", pa.float64()),
        ("end_ms", pa.float64()),
        ("dur_ms", pa.float64()),
        ("is_root", pa.bool_()),
        ("err", pa.bool_()),
        ("op_name", pa.string()),
    ]
)
"""What `normalise()` returns: per span the ids (a span without an id null; a root's
parent null when it has none, else the root marker it was given), the stage label, the
times in ms from the clock's epoch, the root flag, the error flag and the operation name
(the span profile's key whatever the stage label is)."""

NS_MS = 1e-6
"""Milliseconds per nanosecond: the unit of every span time the decoders give."""


def epoch_ms_per_unit(epoch: float) -> float:
    """ms per unit of an epoch time of this size: ns past 1e17 (1973 in ns), us past 1e14,
    ms past 1e11, else s. How a span table's integer epoch columns are read, and a trace
    file's clock: its times are ns, but a first start too small for ns is read by this
    rule too (as the span table reader read the files before they had their own path)."""
    magnitude = abs(epoch)
    if magnitude > 1e17:
        return NS_MS
    if magnitude > 1e14:
        return 1e-3
    if magnitude > 1e11:
        return 1.0
    return 1e3


def normalise(
    rows: Sequence[SpanRow],
    span_stage: Literal["operation", "service"],
    *,
    epoch_ns: int | None = None,
    ms_per_unit: float = NS_MS,
) -> pa.Table:
    """The span table (`SPAN_TABLE`) of `rows`: times in ms from `epoch_ns` (default the
    first row's start; integer ns relative to it before going to float, so durations stay
    exact to the ns), the stage label (operation or service) in `stage_raw`, and each
    span's duration and root flag (no parent, or a root marker). `ms_per_unit` is a trace
    file's own reading of its clock (`trace_rows.FileClock`); `follows` is null (OTLP has
    no FOLLOWS_FROM: a Jaeger file sets it)."""
    trace, span, parent, name, service, start, end, error, kind, _ = pa.array(
        rows, type=SPAN_ROW
    ).flatten()
    start_ns = start.to_numpy(zero_copy_only=False).astype(np.int64)
    end_ns = end.to_numpy(zero_copy_only=False).astype(np.int64)
    if epoch_ns is None:
        epoch_ns = int(start_ns[0]) if len(start_ns) else 0
    start_ms = (start_ns - epoch_ns).astype(np.float64) * ms_per_unit
    end_ms = (end_ns - epoch_ns).astype(np.float64) * ms_per_unit
    no_parent = pc.equal(parent, "")
    is_root = pc.or_(no_parent, pc.is_in(pc.utf8_lower(parent), pa.array(ROOT_PARENTS)))
    # A root's marker ("root", "0000...") stays its parent text, as the span reader kept
    # it: the root flag, not the parent, says it has none (the walks skip roots).
    none = pa.scalar(None, pa.string())
    columns = [
        trace,
        pc.if_else(pc.equal(span, ""), none, span),
        pc.if_else(no_parent, none, parent),
        service if span_stage == "service" else name,
        service,
        kind,
        pa.nulls(len(rows), pa.bool_()),
        start_ms,
        end_ms,
        np.maximum(end_ms - start_ms, 0.0),
        is_root,
        error,
        name,
    ]
    return pa.Table.from_arrays(columns, schema=SPAN_TABLE)
