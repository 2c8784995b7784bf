"""The observation write-ahead log: records with and without stage times, one fsync per group."""

from __future__ import annotations

import errno
import os
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailbudget.serve.wal import Batch, ObservationLog, StageColumn


def _batch(seq: int, n: int, stages: dict[str, StageColumn] | None = None) -> Batch:
    rng = np.random.default_rng(seq)
    return Batch(
        seq,
        1_700_000_000 + np.arange(n, dtype=np.float64),
        rng.lognormal(6, 0.5, n),
        rng.random(n) < 0.1,
        stages or {},
    )


def _same(a: Batch, b: Batch) -> None:
    assert a.seq == b.seq
    np.testing.assert_array_equal(a.ts, b.ts)
    np.testing.assert_array_equal(a.total_ms, b.total_ms)
    np.testing.assert_array_equal(a.error, b.error)
    assert set(a.stages) == set(b.stages)
    for name, col in a.stages.items():
        np.testing.assert_array_equal(col.index, b.stages[name].index)
        np.testing.assert_array_equal(col.ms, b.stages[name].ms)


@pytest.fixture
def fdatasyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the real fdatasync calls, by file descriptor."""
    calls: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    return calls


def test_append_many_is_one_write_and_one_fsync(tmp_path, fdatasyncs):
    wal = ObservationLog(tmp_path / "wal")
    stages = {"llm": StageColumn(np.array([0, 2]), np.array([5.0, 7.5]))}
    batches = [_batch(1, 3, stages), _batch(2, 1), _batch(3, 40)]
    wal.append_many(batches)
    assert len(fdatasyncs) == 1 and (wal.appended, wal.fsyncs) == (3, 1)
    fourth = _batch(4, 2)
    wal.append(4, fourth.ts, fourth.total_ms, fourth.error)  # one batch: still one fsync
    assert len(fdatasyncs) == 2 and (wal.appended, wal.fsyncs) == (4, 2)
    wal.close()
    got = list(ObservationLog(tmp_path / "wal").batches())
    assert [b.seq for b in got] == [1, 2, 3, 4]
    for want, have in zip([*batches, fourth], got, strict=True):
        _same(want, have)


def test_records_written_before_stage_times_existed_still_replay(tmp_path):
    # The TBW1 record layout exactly as tailbudget wrote it before stages were logged.
    ts, total, err = np.array([1.0, 2.0]), np.array([10.0, 20.0]), np.array([False, True])
    payload = (
        ts.astype("<f8").tobytes() + total.astype("<f8").tobytes() + err.astype("u1").tobytes()
    )
    old = struct.pack("<4sQII", b"TBW1", 7, 2, zlib.crc32(payload)) + payload
    (tmp_path / "wal").write_bytes(old)
    wal = ObservationLog(tmp_path / "wal")
    wal.append_many([_batch(8, 2, {"db": StageColumn(np.array([1]), np.array([3.0]))})])
    got = list(wal.batches())
    assert [(b.seq, len(b), dict(b.stages)) for b in got[:1]] == [(7, 2, {})]
    assert list(got[0].error) == [False, True] and list(got[1].stages) == ["db"]
    # New records are TBW3 whatever they carry; the old ones before them still read.
    wal.append_many([Batch(9, ts, total, err)])
    assert [b.seq for b in wal.batches()] == [7, 8, 9]
    assert (tmp_path / "wal").read_bytes()[len(old) : len(old) + 4] == b"TBW3"


def test_tbw2_records_still_replay(tmp_path):
    ts, total, err = np.array([1.0, 2.0]), np.array([10.0, 20.0]), np.array([False, True])
    block = struct.pack("<HI", 2, 1) + b"db" + struct.pack("<I", 1) + struct.pack("<d", 3.5)
    payload = (
        ts.astype("<f8").tobytes()
        + total.astype("<f8").tobytes()
        + err.astype("u1").tobytes()
        + block
    )
    header = struct.pack("<4sQII", b"TBW2", 4, 2, zlib.crc32(payload))
    (tmp_path / "wal").write_bytes(header + struct.pack("<I", len(block)) + payload)
    (got,) = ObservationLog(tmp_path / "wal").batches()
    assert got.seq == 4 and list(got.stages["db"].ms) == [3.5]


def test_a_corrupt_last_record_is_a_torn_tail(tmp_path):
    wal = ObservationLog(tmp_path / "wal")
    stages = {"retrieval": StageColumn(np.array([0, 1]), np.array([1.0, 2.0]))}
    wal.append_many([_batch(1, 2), _batch(2, 2, stages)])
    wal.close()
    data = bytearray((tmp_path / "wal").read_bytes())
    data[-3] ^= 0xFF  # inside the last stage value
    (tmp_path / "wal").write_bytes(bytes(data))
    got = ObservationLog(tmp_path / "wal").read()
    assert [b.seq for b in got.batches] == [1] and got.corruption == []
    assert got.torn_bytes > 0 and got.intact_end + got.torn_bytes == len(data)


@pytest.mark.parametrize("where", ["payload", "header", "magic"])
def test_a_flipped_byte_mid_log_costs_one_record_not_the_rest(tmp_path, where):
    wal = ObservationLog(tmp_path / "wal")
    batches = [_batch(seq, 5) for seq in range(1, 1001)]
    wal.append_many(batches)
    wal.close()
    data = bytearray((tmp_path / "wal").read_bytes())
    record = len(data) // 1000
    offset = {"payload": 40, "header": 13, "magic": 1}[where]
    data[799 * record + offset] ^= 0x5A  # inside batch 800
    (tmp_path / "wal").write_bytes(bytes(data))
    got = ObservationLog(tmp_path / "wal").read()
    assert [b.seq for b in got.batches] == [*range(1, 800), *range(801, 1001)]
    (bad,) = got.corruption
    assert (bad.offset, bad.length, bad.batches_lost, bad.after_seq) == (
        799 * record,
        record,
        1,
        799,
    )
    assert got.torn_bytes == 0
    assert "1 acknowledged batch(es) lost" in bad.describe(tmp_path / "wal")


def test_cut_removes_a_torn_tail_so_new_records_follow_intact_ones(tmp_path):
    wal = ObservationLog(tmp_path / "wal")
    wal.append_many([_batch(1, 3)])
    wal.close()
    with open(tmp_path / "wal", "ab") as fh:
        fh.write(b"TBW3\x02\x00\x00\x00garbage")
    wal = ObservationLog(tmp_path / "wal")
    found = wal.read()
    wal.cut(found.intact_end)
    wal.append_many([_batch(2, 3)])
    again = wal.read()
    assert [b.seq for b in again.batches] == [1, 2] and again.torn_bytes == 0
    wal.close()


def test_a_failed_fsync_cuts_the_whole_group_off(tmp_path, monkeypatch):
    wal = ObservationLog(tmp_path / "wal")
    wal.append_many([_batch(1, 5)])
    size = wal.size()

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(OSError, match="I/O error"):
        wal.append_many([_batch(2, 5), _batch(3, 5)])
    assert wal.size() == size and wal.appended == 1  # none of the group stays or counts
    monkeypatch.undo()
    wal.append_many([_batch(4, 5)])
    assert [b.seq for b in wal.batches()] == [1, 4]
    wal.close()


_names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 30),
    raw=st.dictionaries(
        _names,
        st.lists(st.tuples(st.integers(0, 29), st.floats(0, 1e7)), min_size=1, max_size=30),
        max_size=5,
    ),
)
def test_stage_columns_round_trip(tmp_path_factory, n, raw):
    stages = {}
    for name, pairs in raw.items():
        rows = sorted({r % n for r, _ in pairs})
        values = [v for _, v in pairs][: len(rows)]
        rows = rows[: len(values)]
        stages[name] = StageColumn(np.array(rows, dtype=np.int64), np.array(values))
    path = tmp_path_factory.mktemp("wal") / "wal"
    wal = ObservationLog(path)
    batch = _batch(1, n, stages)
    wal.append_many([batch])
    wal.close()
    (got,) = list(ObservationLog(path).batches())
    _same(batch, got)
