"""TBW5 records: LLM series (ttft, tpot, repeated-row itl gaps) durable beside stages."""

from __future__ import annotations

import numpy as np

from tailbudget.serve.wal import _COLUMN_HEAD, Batch, ObservationLog, StageColumn


def _batch(seq: int, series: bool) -> Batch:
    n = 4
    stages = {"llm": StageColumn(np.array([0, 2]), np.array([5.0, 6.0]))}
    extra = {}
    if series:
        extra = {
            "ttft": StageColumn(np.arange(n), np.array([10.0, 20.0, 30.0, 40.0])),
            "itl": StageColumn(np.array([0, 0, 0, 3, 3]), np.array([1.0, 2.0, 3.0, 4.0, 5.0])),
        }
    return Batch(seq, np.full(n, 100.0 + seq), np.full(n, 50.0), np.zeros(n, bool), stages, extra)


def test_series_round_trip_and_plain_batches_stay_tbw3(tmp_path) -> None:
    log = ObservationLog(tmp_path / "wal")
    log.append_many([_batch(1, False), _batch(2, True), _batch(3, False)])
    data = (tmp_path / "wal").read_bytes()
    assert data[:4] == b"TBW3" and b"TBW5" in data
    got = list(log.batches())
    assert [b.seq for b in got] == [1, 2, 3]
    assert got[0].series == {} and got[2].series == {}
    itl = got[1].series["itl"]
    assert itl.index.tolist() == [0, 0, 0, 3, 3] and itl.ms.tolist() == [1, 2, 3, 4, 5]
    assert got[1].series["ttft"].ms.tolist() == [10, 20, 30, 40]
    assert got[1].stages["llm"].index.tolist() == [0, 2]
    log.close()


def test_a_damaged_series_record_is_skipped_and_the_next_one_kept(tmp_path) -> None:
    log = ObservationLog(tmp_path / "wal")
    log.append_many([_batch(1, True), _batch(2, True), _batch(3, True)])
    log.close()
    data = bytearray((tmp_path / "wal").read_bytes())
    second = data.find(b"TBW5", 4)
    data[second + 60] ^= 0xFF  # a byte inside the second record's payload
    (tmp_path / "wal").write_bytes(bytes(data))
    contents = ObservationLog(tmp_path / "wal").read()
    assert [b.seq for b in contents.batches] == [1, 3]
    assert contents.corruption and contents.corruption[0].batches_lost == 1


def test_columns_over_every_row_are_stored_without_their_indexes(tmp_path) -> None:
    log = ObservationLog(tmp_path / "wal")
    n = 4
    dense = Batch(
        1,
        np.full(n, 100.0),
        np.full(n, 50.0),
        np.zeros(n, bool),
        {"llm": StageColumn(np.arange(n), np.array([1.0, 2.0, 3.0, 4.0]))},
        {"ttft": StageColumn(np.arange(n), np.array([10.0, 20.0, 30.0, 40.0]))},
    )
    # Same length as the batch but not rows 0..n-1 in order: indexes kept.
    shuffled = {"ttft": StageColumn(np.array([1, 0, 2, 3]), np.array([1.0, 2.0, 3.0, 4.0]))}
    log.append_many([dense, Batch(2, dense.ts, dense.total_ms, dense.error, {}, shuffled)])
    data = (tmp_path / "wal").read_bytes()
    first, second = data.split(b"TBW5")[1:]
    # The second record has ttft's 4-byte indexes but not the stage column (head 7 bytes,
    # its name, 8 bytes a value).
    assert len(second) - len(first) == 4 * n - (7 + len(b"llm") + 8 * n)
    got = log.batches()
    one, two = list(got)
    assert one.series["ttft"].index.tolist() == [0, 1, 2, 3]
    assert one.series["ttft"].ms.tolist() == [10, 20, 30, 40]
    assert one.stages["llm"].ms.tolist() == [1, 2, 3, 4]
    assert two.series["ttft"].index.tolist() == [1, 0, 2, 3] and two.stages == {}
    log.close()


def test_a_dense_flag_on_a_column_of_the_wrong_length_is_damage(tmp_path) -> None:
    from tailbudget.serve.wal import _decode_stages

    block = _COLUMN_HEAD.pack(4, 3, 1) + b"ttft" + np.zeros(3).tobytes()
    assert _decode_stages(block, 4, flags=True) is None
    assert _decode_stages(block, 3, flags=True) is not None
    assert _decode_stages(_COLUMN_HEAD.pack(4, 3, 7) + block[7:], 3, flags=True) is None
