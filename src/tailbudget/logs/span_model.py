"""One span model, as OpenTelemetry has one ReadableSpan: a row type, its Arrow schema and
the normalisation the critical path reads.

Every span decoder yields `SpanRow`'s fields: the OTLP protobuf and JSON bodies `serve
--traces` receives (`serve.traces.otlp_body`, `serve.traces.otlp_json`), an app's own
spans (`BudgetSpanProcessor`) and the OTLP and Jaeger trace files `read` takes
(`logs.traces`, whose rows are `SPAN_SCHEMA`'s columns by name, a missing field null
where a live span is refused, with the file's `ref_type` and attribute columns beside
them). `SPAN_SCHEMA` is the row as Arrow, for the live batches and the trace files'
Parquet alike, and `normalise()` makes rows the span table the critical path and the
stage choice read, as the span reader (`logs.spans`) normalises a file's spans on the
engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ROOT_PARENTS", "SPAN_ROW", "SPAN_SCHEMA", "SpanRow", "normalise"]

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
`parent_id` (a trace file's table holds its spans' attributes beside them, and an
attribute called `trace` or `span` is an attribute, not the id)."""

SPAN_ROW = pa.struct(SPAN_SCHEMA)
"""`SPAN_SCHEMA` as one struct type: rows convert once, not once a column."""


def normalise(rows: Sequence[SpanRow], span_stage: Literal["operation", "service"]) -> pa.Table:
    """The span table of `rows`: ms from the first start (integer ns relative to it, as
    the reader does), a root's parent null (none, or a root marker), the stage label
    (operation or service) in `stage_raw`, and each span's duration and root flag."""
    trace, span, parent, name, service, start, end, _, kind, _ = pa.array(
        rows, type=SPAN_ROW
    ).flatten()
    start_ns = start.to_numpy(zero_copy_only=False).astype(np.int64)
    end_ns = end.to_numpy(zero_copy_only=False).astype(np.int64)
    base = int(start_ns[0]) if len(start_ns) else 0
    start_ms = (start_ns - base).astype(np.float64) * 1e-6
    end_ms = (end_ns - base).astype(np.float64) * 1e-6
    is_root = pc.or_(pc.equal(parent, ""), pc.is_in(pc.utf8_lower(parent), pa.array(ROOT_PARENTS)))
    return pa.table(
        {
            "trace": trace,
            "span": span,
            "parent": pc.if_else(is_root, pa.scalar(None, pa.string()), parent),
            "stage_raw": service if span_stage == "service" else name,
            "service": service,
            "kind": kind,
            "follows": pa.nulls(len(rows), pa.bool_()),  # OTLP has no FOLLOWS_FROM
            "start_ms": start_ms,
            "end_ms": end_ms,
            "dur_ms": np.maximum(end_ms - start_ms, 0.0),
            "is_root": is_root,
        }
    )
