"""Arrow IPC stream bodies: the same batch as the JSON forms, the same one-line errors."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailbudget.serve.arrow_body import ARROW_STREAM
from tailbudget.serve.ingest import BadBatch, ParsedBatch, parse_observations

T0 = 1_800_000_000.0


def stream(table: pa.Table | dict[str, Any]) -> bytes:
    """`table` as the bytes of an Arrow IPC stream (several record batches when long)."""
    if isinstance(table, dict):
        table = pa.table(table)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=3):
            writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def arrow(table: pa.Table | dict[str, Any], now_s: float = T0 + 10) -> ParsedBatch:
    return parse_observations(stream(table), now_s=now_s, content_type=ARROW_STREAM)


def same(a: ParsedBatch, b: ParsedBatch) -> None:
    assert a.ts.tolist() == b.ts.tolist()
    assert a.total_ms.tolist() == b.total_ms.tolist()
    assert a.error.tolist() == b.error.tolist()
    for got, want in ((a.series, b.series), (a.stages, b.stages)):
        assert sorted(got) == sorted(want)
        for name, col in want.items():
            assert got[name].index.tolist() == col.index.tolist(), name
            assert got[name].ms.tolist() == col.ms.tolist(), name


COLUMNS: dict[str, Any] = {
    "ts": [T0, T0 + 1, None, T0 + 3],
    "total_ms": [1000.0, 500.0, 800.0, 90.0],
    "error": [True, False, None, False],
    "ttft_ms": [100.0, None, None, 20.5],
    "output_tokens": [10, None, None, 1],
    "itl_p99_ms": [None, 40.0, None, None],
    "itl_ms": [None, None, [1.0, 2.0, 3.0], []],
    "route": ["/a", "/b", "/c", "/d"],  # other columns are ignored, as in JSON
}


def test_an_arrow_stream_parses_to_the_same_batch_as_json_columns() -> None:
    stages = pa.array(
        [None, {"db": 7.0, "llm": None}, {"db": None, "llm": 3.0}, {"db": 1.0, "llm": 2.0}],
        type=pa.struct([("db", pa.float64()), ("llm", pa.float32())]),
    )
    table = pa.table(COLUMNS).append_column("stages", stages)
    body = {**COLUMNS, "stages": {"db": [None, 7, None, 1], "llm": [None, None, 3, 2]}}
    want = parse_observations(json.dumps(body).encode(), now_s=T0 + 10)
    got = arrow(table)
    same(got, want)
    assert got.ts[2] == T0 + 10  # a null ts: when the server received the batch
    assert got.series["tpot"].ms.tolist() == [(1000 - 100) / 9, 0.0]


def test_timestamps_with_a_zone_and_integer_columns_are_read() -> None:
    when = pa.array([int(T0 * 1000), int((T0 + 2) * 1000)], type=pa.timestamp("ms", tz="UTC"))
    table = pa.table(
        {"ts": when, "total_ms": pa.array([5, 7], pa.int32()), "error": pa.array([0, 1], pa.int8())}
    )
    got = arrow(table)
    assert got.ts.tolist() == [T0, T0 + 2]
    assert got.total_ms.tolist() == [5.0, 7.0] and got.error.tolist() == [False, True]
    assert got.series == {} and got.stages == {}


def test_a_body_of_plain_observations_costs_no_series() -> None:
    got = arrow({"total_ms": [1.0, 2.0]}, now_s=T0)
    assert got.ts.tolist() == [T0, T0] and got.error.tolist() == [False, False]


def _ts_naive() -> pa.Table:
    return pa.table({"ts": pa.array([0], pa.timestamp("s")), "total_ms": [1.0]})


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"ttft_ms": [1.0]}, "has no total_ms column"),
        ({"total_ms": pa.array([], pa.float64())}, "no observations"),
        ({"total_ms": [1.0, None]}, "item 1: total_ms must be a number >= 0 .*got null"),
        ({"total_ms": [1.0, -2.0]}, "item 1: total_ms must be a number >= 0 .*got -2"),
        ({"total_ms": [1.0, math.nan]}, "item 1: total_ms must be a number >= 0 .*got nan"),
        ({"total_ms": ["1"]}, "column total_ms must be milliseconds .*got an Arrow string"),
        ({"total_ms": [5.0, 5.0], "ttft_ms": [1.0, 9.0]}, "item 1: ttft_ms \\(9\\) exceeds"),
        ({"total_ms": [5.0], "ttft_ms": [-1.0]}, "item 0: ttft_ms must be a number >= 0"),
        ({"total_ms": [5.0, 5.0], "output_tokens": [3, 0]}, "item 1: output_tokens must be a w"),
        ({"total_ms": [5.0], "output_tokens": [2.5]}, "item 0: output_tokens must be a whole"),
        ({"total_ms": [5.0], "ttft_ms": [True]}, "column ttft_ms must be numbers"),
        ({"total_ms": [5.0], "error": pa.array([2], pa.int64())}, "item 0: error must be true"),
        ({"total_ms": [5.0], "error": ["yes"]}, "column error must be boolean"),
        ({"total_ms": [5.0], "ts": [T0 + 10 + 3600]}, "item 0: ts is 3,600 s ahead"),
        ({"total_ms": [5.0], "ts": [T0 - 30 * 86_400]}, "item 0: ts .* days before the server"),
        (_ts_naive(), "ts is a timestamp without a time zone"),
        ({"total_ms": [5.0], "itl_ms": [[1.0, None]]}, "item 0: itl_ms gaps must be numbers"),
        ({"total_ms": [5.0], "itl_ms": [1.0]}, "column itl_ms must be a list of gaps"),
        ({"total_ms": [5.0], "stages": [{"": 1.0}]}, "stage name '' must be 1 to 100"),
        ({"total_ms": [5.0], "stages": [{"db": -1.0}]}, "item 0: stages.db must be a number"),
        ({"total_ms": [5.0], "stages": [1.0]}, "column stages must be a struct"),
    ],
)
def test_bad_arrow_columns_name_the_column_or_the_item(table: Any, message: str) -> None:
    with pytest.raises(BadBatch, match=message) as caught:
        arrow(table)
    assert "\n" not in str(caught.value)


def test_a_column_sent_twice_is_refused() -> None:
    table = pa.Table.from_arrays([pa.array([1.0]), pa.array([2.0])], names=["total_ms", "total_ms"])
    with pytest.raises(BadBatch, match="column total_ms appears more than once"):
        arrow(table)


def test_too_many_stage_fields_are_refused() -> None:
    fields = {f"s{k}": [1.0] for k in range(65)}
    table = pa.table({"total_ms": [5.0], "stages": pa.array([{k: 1.0 for k in fields}])})
    with pytest.raises(BadBatch, match="more than 64 stage names"):
        arrow(table)


@pytest.mark.parametrize(
    "body", [b"", b"not arrow at all", b"\xff\xff\xff\xff\x10\x00\x00\x00garbage-garbage"]
)
def test_a_body_that_is_not_an_arrow_stream_is_a_one_line_400(body: bytes) -> None:
    with pytest.raises(BadBatch, match="body is not a valid Arrow IPC stream") as caught:
        parse_observations(body, now_s=T0, content_type=f"{ARROW_STREAM}; charset=binary")
    assert "\n" not in str(caught.value)


def test_the_arrow_file_format_is_refused_with_the_type_to_send() -> None:
    with pytest.raises(BadBatch, match="send the Arrow IPC stream format"):
        parse_observations(b"ARROW1", now_s=T0, content_type="application/vnd.apache.arrow.file")


def test_a_truncated_stream_is_refused() -> None:
    body = stream({"total_ms": [1.0, 2.0, 3.0, 4.0], "ttft_ms": [0.5, 1.0, 1.5, 2.0]})
    for cut in (len(body) // 2, len(body) - 9):
        with pytest.raises(BadBatch):
            parse_observations(body[:cut], now_s=T0, content_type=ARROW_STREAM)


_ms = st.one_of(st.none(), st.floats(min_value=0, max_value=1e6, allow_nan=False))
_rows = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1e6),
        _ms,
        st.one_of(st.none(), st.integers(min_value=-1, max_value=500)),
        st.one_of(st.none(), st.booleans()),
        st.one_of(st.none(), st.lists(st.floats(min_value=-1, max_value=1e3), max_size=3)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(_rows)
def test_arrow_and_json_columns_agree_on_any_batch(rows: list[tuple[Any, ...]]) -> None:
    """Accepted by both with the same batch, or refused by both with the same reason."""
    keys = ("total_ms", "ttft_ms", "output_tokens", "error", "itl_ms")
    columns = {k: [r[i] for r in rows] for i, k in enumerate(keys)}
    table = pa.table(
        {
            "total_ms": pa.array(columns["total_ms"], pa.float64()),
            "ttft_ms": pa.array(columns["ttft_ms"], pa.float64()),
            "output_tokens": pa.array(columns["output_tokens"], pa.int64()),
            "error": pa.array(columns["error"], pa.bool_()),
            "itl_ms": pa.array(columns["itl_ms"], pa.list_(pa.float64())),
        }
    )
    try:
        want: ParsedBatch | str = parse_observations(json.dumps(columns).encode(), now_s=T0)
    except BadBatch as exc:
        want = str(exc).split(",")[0].split(" must ")[0]
    try:
        got: ParsedBatch | str = arrow(table, now_s=T0)
    except BadBatch as exc:
        got = str(exc).split(",")[0].split(" must ")[0]
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
    else:
        same(got, want)
        assert np.all(got.ts == T0)


def test_damaged_streams_are_refused_or_read_never_an_exception() -> None:
    """Flipped bytes anywhere in a stream: a BadBatch or a valid batch, nothing else."""
    rng = np.random.default_rng(11)
    stages = pa.array([{"db": 1.0}, None, {"db": 3.0}, {"db": 4.0}])
    body = bytearray(stream(pa.table(COLUMNS).append_column("stages", stages)))
    outcomes = {"refused": 0, "read": 0}
    for _ in range(400):
        damaged = bytearray(body)
        for pos in rng.integers(0, len(body), int(rng.integers(1, 4))):
            damaged[pos] = int(rng.integers(0, 256))
        try:
            batch = parse_observations(bytes(damaged), now_s=T0 + 10, content_type=ARROW_STREAM)
        except BadBatch as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
        else:
            assert len(batch) == batch.total_ms.shape[0] > 0
            outcomes["read"] += 1
    assert outcomes["refused"] > 0


def test_buffers_are_read_at_any_offset_as_pyarrow_reads_them() -> None:
    from tailbudget.serve import arrow_body

    values = pa.array([1.5, None, 3.0, None, 5.0, 6.0, None, 8.0, 9.0, 10.0], pa.float32())
    flags = pa.array([True, None, False, True, None, True, False, True, True, False])
    for start in range(0, 7):
        part = values.slice(start, 3)
        got, present = arrow_body._as_float(part)
        want = [math.nan if v is None else v for v in part.to_pylist()]
        np.testing.assert_array_equal(got, np.array(want, dtype=np.float64))
        if part.null_count:
            assert present.tolist() == [v is not None for v in part.to_pylist()]
        got_flags = arrow_body._errors({"error": flags.slice(start, 3)}, 3).tolist()
        assert got_flags == [v is True for v in flags.slice(start, 3).to_pylist()]


def test_reading_an_arrow_body_never_imports_pandas() -> None:
    """pyarrow's to_numpy would import pandas: tens of MiB a server never needs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    # This checkout's package, not whichever one is installed (a worktree's differs).
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    body = stream(pa.table({**COLUMNS, "ts": [T0, None, T0, T0]}))
    code = (
        "import sys, pyarrow\n"
        "from tailbudget.serve.ingest import parse_observations\n"
        f"parse_observations(sys.stdin.buffer.read(), now_s={T0 + 10}, "
        "content_type='application/vnd.apache.arrow.stream')\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=body, capture_output=True, check=True, env=env
    )
    assert done.stdout.decode().strip() == "False"
