"""TBW4 records: LLM series (ttft, tpot, repeated-row itl gaps) durable beside stages."""

from __future__ import annotations

import numpy as np

from tailbudget.control.wal import Batch, ObservationLog, StageColumn


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
    assert data[:4] == b"TBW3" and b"TBW4" in data
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
    second = data.find(b"TBW4", 4)
    data[second + 60] ^= 0xFF  # a byte inside the second record's payload
    (tmp_path / "wal").write_bytes(bytes(data))
    contents = ObservationLog(tmp_path / "wal").read()
    assert [b.seq for b in contents.batches] == [1, 3]
    assert contents.corruption and contents.corruption[0].batches_lost == 1
