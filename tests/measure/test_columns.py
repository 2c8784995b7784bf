"""The columnar writer path gives exactly what the checked per-row path gives."""

from __future__ import annotations

import functools
import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tailbudget.measure.columns import blocks, iso_utc
from tailbudget.measure.record import Clock, Extra, IsoTime, Record, to_rows
from tailbudget.measure.sinks.base import Batch

EPOCH = 1_764_400_000_000_000_000  # 2025-11-29, in ns
dumps = functools.partial(orjson.dumps, default=str)

stage_names = st.lists(st.sampled_from(["embed", "retrieval", "llm", "llm/decode"]), max_size=4)
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**62), 2**62),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),  # commas, quotes, backslashes, newlines, any unicode
    st.lists(st.integers(0, 9), max_size=3),
)
covariates = st.dictionaries(st.sampled_from(["route", "seq_len", "tag", "ts", "llm_ms"]), values)


@st.composite
def records(draw: st.DrawFn) -> tuple[object, ...]:
    start = EPOCH + draw(st.integers(0, 3_000_000_000))  # a batch spanning a few seconds
    t, flat = start, []
    for name in draw(stage_names):
        t0 = t + draw(st.integers(0, 10**6))
        t = t0 + draw(st.integers(0, 10**8))
        flat += [name, t0, t]
    end = t + draw(st.integers(0, 10**6))
    error = draw(st.sampled_from([None, None, None, "ValueError"]))
    extra = None
    if draw(st.integers(0, 9)) == 0:
        extra = Extra()
        extra.degraded.append("rerank")
    rid = draw(st.one_of(st.integers(0, 10**9), st.text(min_size=1, max_size=6)))
    return (rid, start, end, tuple(flat), error, draw(covariates), extra)


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(records(), min_size=1, max_size=40), shapes=st.integers(1, 3))
def test_blocks_rows_equal_checked_rows(batch, shapes):
    # Repeat a few record shapes so that blocks form, and keep some odd ones.
    batch = [batch[i % shapes] if i % 4 else r for i, r in enumerate(batch)]
    # Names that repeat anywhere in the batch: both paths then add their count columns
    # to every row (the row path alone would start at the first repeat).
    repeated = {n for r in batch for n in r[3][0::3] if r[3][0::3].count(n) > 1}
    records = [Record._make(r) for r in batch]
    expected = to_rows(records, Clock(0, 0), "p-", set(repeated), IsoTime())
    got = Batch(batch, Clock(0, 0), "p-", set(repeated)).rows
    assert got == expected
    found, rest = blocks(batch, 0, "p-", set(repeated))
    covered = sorted([p for b in found for p in b.positions] + rest)
    assert covered == list(range(len(batch)))
    for block in found:
        lines = block.json_lines(dumps)
        parsed = [json.loads(line) for line in lines]
        # JSON turns tuples into lists; compare through the same encoder.
        assert parsed == [json.loads(dumps(expected[p])) for p in block.positions]
        assert block.jsonl(dumps) == b"".join(line + b"\n" for line in lines)


def test_uniform_batch_is_one_block_and_odd_records_take_the_row_path():
    same = [
        (i, EPOCH + i, EPOCH + i + 50, ("a", EPOCH + i + 1, EPOCH + i + 9), None, {"k": i}, None)
        for i in range(10)
    ]
    found, rest = blocks(same, 0, "p-", set())
    assert len(found) == 1 and rest == [] and found[0].positions == list(range(10))
    repeated = (
        10,
        EPOCH,
        EPOCH + 50,
        ("a", EPOCH, EPOCH + 1, "a", EPOCH + 2, EPOCH + 3),
        None,
        {},
        None,
    )
    # A stage that ended after its request sends its whole shape to the row path.
    late = (11, EPOCH, EPOCH + 50, ("a", EPOCH, EPOCH + 99), None, {"x": 1}, None)
    clash = (12, EPOCH, EPOCH + 50, ("a", EPOCH, EPOCH + 9), None, {"a_ms": 1}, None)
    found, rest = blocks([*same, repeated, late, clash], 0, "p-", set())
    assert [b.positions for b in found] == [list(range(10))] and rest == [10, 11, 12]


def test_iso_text_matches_the_row_path_across_seconds():
    ns = [EPOCH + k * 250_000_123 for k in range(12)] + [0, EPOCH + 10**15]
    iso = IsoTime()
    assert iso_utc(ns) == [iso(n) for n in ns]


def test_parquet_keeps_batch_order_across_shapes(tmp_path, registry, read_parquet):
    from tailbudget import Recorder

    rec = Recorder(sink=tmp_path / "r.parquet", registry=registry, batch_size=50)
    for i in range(120):
        with rec.request(request_id=f"r{i}", n=i) as req:
            with req.stage("a" if i % 3 else "b"):
                pass
            if i % 7 == 0:
                req.fail("http_500")
    rec.close()
    rows = read_parquet(tmp_path / "r.parquet")
    assert [r["request_id"] for r in rows] == [f"r{i}" for i in range(120)]
    assert [r["n"] for r in rows] == list(range(120))
    assert sum(r["error"] for r in rows) == len(range(0, 120, 7))
