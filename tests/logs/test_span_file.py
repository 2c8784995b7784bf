"""The on-disk span table: every chunk written comes back, however often it is read."""

from __future__ import annotations

import pyarrow as pa

from tailbudget.logs.engine import connect
from tailbudget.logs.span_file import SpanFile

SCHEMA = pa.schema([("trace", pa.string()), ("dur_ms", pa.float64())])


def test_rows_come_back_on_every_read_across_chunks() -> None:
    backend = connect()
    with SpanFile(SCHEMA) as sink:
        for i in range(0, 5, 2):
            rows = [{"trace": f"t{k}", "dur_ms": float(k)} for k in range(i, min(i + 2, 5))]
            sink.write(pa.Table.from_pylist(rows, schema=SCHEMA))
        sink.write(SCHEMA.empty_table())
        first = sink.table(backend).to_pyarrow()
        again = sink.table(backend).to_pyarrow()
    assert sink.rows == 5
    assert sorted(first.column("dur_ms").to_pylist()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert again.num_rows == 5


def test_no_rows_is_an_empty_table_of_the_schema() -> None:
    with SpanFile(SCHEMA) as sink:
        table = sink.table(connect()).to_pyarrow()
    assert table.num_rows == 0 and table.schema.names == SCHEMA.names
