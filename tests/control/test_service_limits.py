"""Bodies bounded by what they decode to, and the fields hostile clients send (#29, #30)."""

from __future__ import annotations

import gzip
import time

import numpy as np
import pyarrow as pa
import pytest

from tailbudget.serve.arrow_body import ARROW_STREAM
from tailbudget.serve.arrow_size import ipc_size
from tailbudget.serve.baseline_body import (
    MAX_BASELINES,
    BadBaseline,
    parse_baseline_body,
)
from tailbudget.serve.ingest import BadBatch, BatchTooLarge, parse_observations
from tailbudget.serve.limits import BodyLimits, TooLarge, decompress

NOW = time.time()


def zstd_stream(table: pa.Table, copies: int = 1) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        for _ in range(copies):
            writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def gaps_table(gaps: int) -> pa.Table:
    itl = pa.array([np.zeros(gaps)], type=pa.list_(pa.float64()))
    return pa.table({"total_ms": pa.array([100.0]), "itl_ms": itl})


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """zstd Arrow bodies of a few KiB that decode to 80 MB per 3 KiB."""
    table = gaps_table(10_000_000)
    return {"3k": zstd_stream(table), "9k": zstd_stream(table, 3), "18k": zstd_stream(table, 6)}


@pytest.mark.parametrize(("name", "decoded"), [("3k", 80), ("9k", 240), ("18k", 480)])
def test_compressed_arrow_bombs_are_413_on_what_they_declare(bombs, name, decoded):
    body = bombs[name]
    assert len(body) < 20 * 1024
    size = ipc_size(body)
    assert size.decoded_bytes >= decoded * 1_000_000
    before = pa.total_allocated_bytes()
    with pytest.raises(
        BatchTooLarge, match=r"past the server's max_decoded_bytes 8,388,608"
    ) as caught:
        parse_observations(body, now_s=NOW, content_type=ARROW_STREAM)
    assert isinstance(caught.value, TooLarge) and caught.value.status == 413
    assert pa.total_allocated_bytes() - before < 1024 * 1024  # nothing was decoded


def test_gaps_per_observation_are_bounded_past_the_decoded_limit(bombs):
    roomy = BodyLimits(max_decoded_bytes=1 << 30)
    with pytest.raises(BadBatch, match=r"item 0: itl_ms has 10,000,000 gaps; at most 262,144"):
        parse_observations(bombs["3k"], now_s=NOW, content_type=ARROW_STREAM, limits=roomy)


def test_a_plain_stream_declares_what_it_holds():
    table = pa.table(
        {
            "total_ms": pa.array(np.arange(1000.0)),
            "route": pa.array(["a", "b"] * 500).dictionary_encode(),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    size = ipc_size(sink.getvalue().to_pybytes())
    assert size.rows == 1000 and size.elements >= 2000
    assert table.nbytes - 64 <= size.decoded_bytes <= table.nbytes + 64


def test_gzip_and_zstd_bodies_stop_decoding_at_the_bound():
    limits = BodyLimits(max_decoded_bytes=1024 * 1024)
    small = b'[{"total_ms": 5}]'
    assert decompress(gzip.compress(small), "gzip", limits) == small
    bomb = gzip.compress(b"0" * (200 * 1024 * 1024))
    assert len(bomb) < 300 * 1024
    with pytest.raises(TooLarge, match=r"the gzip body decodes to 1,048,577 bytes or more"):
        decompress(bomb, "gzip", limits)
    zbomb = _zstd_frame(64)
    with pytest.raises(TooLarge, match=r"the zstd body decodes to"):
        decompress(zbomb, "zstd", limits)
    with pytest.raises(ValueError, match="Content-Encoding 'br' is not read"):
        decompress(small, "br", limits)
    with pytest.raises(ValueError, match="the gzip body is corrupt"):
        decompress(b"not gzip", "gzip", limits)


def _zstd_frame(mib: int) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        chunk = b"0" * (1024 * 1024)
        for _ in range(mib):
            out.write(chunk)
    return bytes(sink.getvalue().to_pybytes())


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            b'[{"total_ms": 5, "itl_ms": {"p50": 50, "p99": 10}}]',
            "item 0: itl_ms.p50 (50) exceeds the p99 (10)",
        ),
        (
            b'[{"total_ms": 5, "itl_ms": {"p50": "junk", "p99": 10}}]',
            "item 0: itl_ms.p50 must be a number >= 0 (ms), got 'junk'",
        ),
        (
            b'[{"total_ms": 5}, {"total_ms": 5, "itl_p50_ms": 50, "itl_p99_ms": 10}]',
            "item 1: itl_p50_ms (50) exceeds the p99 (10)",
        ),
        (
            b'[{"total_ms": 5, "itl_p50_ms": "junk", "itl_p99_ms": 10}]',
            "item 0: itl_p50_ms must be a number >= 0, got 'junk'",
        ),
        (
            b'[{"total_ms": 5, "output_tokens": 1000000000000000000000000000000}]',
            "item 0: output_tokens must be a whole number in 1..10,000,000",
        ),
        (
            b'{"total_ms": [5], "output_tokens": [1e30]}',
            "item 0: output_tokens must be a whole number in 1..10,000,000",
        ),
        (
            b'[{"total_ms": 5, "itl_ms": [' + b"1," * 300_000 + b"1]}]",
            "item 0: itl_ms has 300,001 gaps; at most 262,144",
        ),
    ],
    ids=[
        "p50-over-p99",
        "p50-junk",
        "flat-p50-over-p99",
        "flat-junk",
        "tokens-31",
        "tokens-1e30",
        "gaps",
    ],
)
def test_hostile_llm_fields_are_400_naming_the_field(body, says):
    with pytest.raises(BadBatch) as caught:
        parse_observations(body, now_s=NOW)
    assert says in str(caught.value)


def test_a_sane_itl_summary_still_reads():
    batch = parse_observations(
        b'[{"total_ms": 500, "itl_ms": {"p50": 10, "p99": 40}}, {"total_ms": 5}]', now_s=NOW
    )
    assert batch.series["itl_p99"].ms.tolist() == [40.0]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"baselines": {"nosuch.p99": 5}}, "baselines.nosuch.p99: no stage 'nosuch'"),
        ({"baselines": {f"ttft.p{i % 99 + 1}": 5 for i in range(10_000)}}, "at most 64"),
        ({"baselines": {f"db{i}.p99": 5 for i in range(10_000)}}, "10,000 keys; at most 64"),
        ({"p99_ms": 850, "baselines": {"ttft.p99": 400}}, "not both"),
        ({"p99_ms": 850, "extra": 1}, "unknown field 'extra'"),
        ({"baselines": {}}, "baselines is empty"),
        ({"baselines": {"bogus": 1}}, "baselines.bogus"),
        ([1, 2], "send a JSON object"),
        ({"baselines": {"ttft.p99": 1e300}}, "must be below 1e9 ms"),
    ],
    ids=[
        "unknown",
        "many-percentiles",
        "10k-keys",
        "both",
        "extra",
        "empty",
        "bogus",
        "list",
        "huge",
    ],
)
def test_hostile_baselines_are_400_naming_the_field(value, says):
    with pytest.raises(BadBaseline) as caught:
        parse_baseline_body(value, stages={"db"}, kept=set())
    assert says in str(caught.value)


def test_baselines_kept_are_bounded():
    kept = {f"ttft.p{i}" for i in range(1, MAX_BASELINES + 1)}
    with pytest.raises(BadBaseline, match="65 baselines would be kept; at most 64"):
        parse_baseline_body({"baselines": {"tpot.p99": 5}}, stages=(), kept=kept)
    assert parse_baseline_body({"baselines": {"ttft.p1": 7}}, stages=(), kept=kept) == {
        "ttft.p1": 7.0
    }
    assert parse_baseline_body({"baselines": {"db.p99": 7}}, stages={"db"}, kept=()) == {
        "db.p99": 7.0
    }
    assert parse_baseline_body({"p99_ms": 850}, stages=(), kept=()) == {"p99": 850.0}
