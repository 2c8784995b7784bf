"""A trace file's spans as the span model's rows, and the span table they make a chunk at
a time.

The live receivers refuse a span they cannot place (OTLP's partial success); a trace file
keeps reading and rejects the span's whole trace, counted with the reason
(`canonical.SPAN_REASONS`): a `SpanFault`. Every other span is a `FileSpan`: the span
model's `SpanRow`, with the two things only a file holds beside it, a Jaeger
FOLLOWS_FROM reference and the attributes the read asks for (shape covariates, cohorts).
`chunk_table` normalises a chunk by the span model's own `normalise()` on one
`FileClock`, so the engine reads the span table the live batches are, not raw fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

import pyarrow as pa

from tailbudget.logs.span_model import SPAN_TABLE, SpanRow, epoch_ms_per_unit, normalise

__all__ = [
    "ATTR",
    "FileClock",
    "FileItem",
    "FileSpan",
    "SpanFault",
    "chunk_table",
    "file_item",
    "own_fields",
    "table_schema",
]

ATTR = "_tb_attr_"
"""A requested attribute's column in the span table: ATTR + its place among shape, cohorts."""


class FileSpan(NamedTuple):
    """A span a trace file holds whole: the span model's row, whether it only follows from
    its parent (Jaeger's FOLLOWS_FROM: off the parent's critical path), and the requested
    attributes' values as text (None where the span has none)."""

    row: SpanRow
    follows: bool = False
    attrs: tuple[str | None, ...] = ()


class SpanFault(NamedTuple):
    """A span that cannot be timed or placed: its trace ("" when it has none) is rejected
    with `reason`. Its start, when it has one, still sets the file's clock (`FileClock`):
    the clock is the file's first start, whichever span holds it."""

    trace: str
    reason: str
    start_ns: int | None


FileItem = FileSpan | SpanFault


def file_item(
    trace: str | None,
    start_ns: int | None,
    end_ns: int | None,
    fields: tuple[str, str, str, str, bool, str],
    follows: bool = False,
    attrs: tuple[str | None, ...] = (),
) -> FileItem:
    """A span of a file: the fault of one without a trace id (none, or all zeros), a start
    or an end, checked in SPAN_REASONS' order; else its row, of `fields` (span id, parent
    id, name, service, error, kind; "" for an id or kind the span has none of)."""
    if not trace or not trace.strip("0"):
        return SpanFault("", "span_without_trace_id", start_ns)
    if start_ns is None:
        return SpanFault(trace, "span_without_start", None)
    if end_ns is None:
        return SpanFault(trace, "span_without_end", start_ns)
    span, parent, name, service, error, kind = fields
    row = SpanRow(trace, span, parent, name, service, start_ns, end_ns, error, kind)
    return FileSpan(row, follows, attrs)


_OWN = frozenset(
    ("trace_id", "span_id", "parent_id", "name", "service", "start_ns", "end_ns", "error")
) | {"kind", "ref_type"}
"""The names a file's span fields had in the reader's table: an attribute asked for by one
of them read that field (the table's column), and reads it still."""


def own_fields(
    keys: Sequence[str],
    attrs: tuple[str | None, ...],
    trace: str | None,
    start_ns: int | None,
    end_ns: int | None,
    fields: tuple[str, str, str, str, bool, str],
    ref_type: str | None,
) -> tuple[str | None, ...]:
    """`attrs`, each key named as a span field (`cohorts=("service",)`) reading that field
    as text instead of a span attribute."""
    if _OWN.isdisjoint(keys):
        return attrs
    span, parent, name, service, error, kind = fields
    own = {
        "trace_id": trace,
        "span_id": span or None,
        "parent_id": parent or None,
        "name": name,
        "service": service,
        "start_ns": None if start_ns is None else str(start_ns),
        "end_ns": None if end_ns is None else str(end_ns),
        "error": "true" if error else "false",
        "kind": kind or None,
        "ref_type": ref_type,
    }
    return tuple(own.get(k, a) for k, a in zip(keys, attrs, strict=True))


class FileClock:
    """A trace file's epoch: its first start in file order, subtracted from every time
    before it goes to float (ns epochs do not fit a float64 exactly).

    Its unit is read from its magnitude, as the span reader reads a span table's epoch
    columns: a file whose first start is too small for an epoch in ns is read as us, ms
    or s (a behaviour kept from the reader the files went through before)."""

    def __init__(self) -> None:
        self.epoch_ns: int | None = None

    def see(self, items: Sequence[FileItem]) -> None:
        """Take the epoch from the first start in `items` if none is set yet."""
        if self.epoch_ns is not None:
            return
        for item in items:
            start = item.row.start_ns if isinstance(item, FileSpan) else item.start_ns
            if start is not None:
                self.epoch_ns = start
                return

    @property
    def ms_per_unit(self) -> float:
        return epoch_ms_per_unit(self.epoch_ns or 0)

    @property
    def offset_ms(self) -> float:
        """The epoch in ms: what a trace's start_ms adds to be a time of day."""
        return (self.epoch_ns or 0) * self.ms_per_unit


def table_schema(shape: int, cohorts: int) -> pa.Schema:
    """The span table of a trace file: `SPAN_TABLE`, the requested attributes (shape as
    numbers, cohorts as text) and `bad`, a SPAN_REASONS name for a fault's row."""
    schema = SPAN_TABLE
    for i in range(shape + cohorts):
        schema = schema.append(pa.field(f"{ATTR}{i}", pa.float64() if i < shape else pa.string()))
    return schema.append(pa.field("bad", pa.string()))


def chunk_table(
    items: Sequence[FileItem],
    clock: FileClock,
    span_stage: Literal["operation", "service"],
    shape: int,
    cohorts: int,
) -> pa.Table:
    """The span table of a chunk: its spans normalised on the file's clock, then one row
    per fault (its trace, null when it has none, and its reason)."""
    clock.see(items)
    spans = [i for i in items if type(i) is FileSpan]
    faults = [i for i in items if type(i) is SpanFault]
    schema = table_schema(shape, cohorts)
    table = normalise(
        [s.row for s in spans], span_stage, epoch_ns=clock.epoch_ns, ms_per_unit=clock.ms_per_unit
    )
    table = table.set_column(
        SPAN_TABLE.get_field_index("follows"),
        "follows",
        pa.array([s.follows for s in spans], pa.bool_()),
    )
    for i in range(shape + cohorts):
        values = [s.attrs[i] for s in spans]
        column = [_number(v) for v in values] if i < shape else values
        field = schema.field(f"{ATTR}{i}")
        table = table.append_column(field, pa.array(column, field.type))
    table = table.append_column(schema.field("bad"), pa.nulls(len(spans), pa.string()))
    if not faults:
        return table
    bad = {
        "trace": pa.array([f.trace or None for f in faults], pa.string()),
        "bad": pa.array([f.reason for f in faults], pa.string()),
    }
    rest = pa.table(
        {f.name: bad.get(f.name, pa.nulls(len(faults), f.type)) for f in schema}, schema=schema
    )
    return pa.concat_tables([table, rest])


def _number(text: str | None) -> float | None:
    """A shape covariate: the attribute as a number, None when it is not one."""
    if text is None:
        return None
    try:
        return float(text)
    except (TypeError, ValueError, OverflowError):
        return None
