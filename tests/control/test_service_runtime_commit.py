"""The runtime under concurrent ingest: group commit, compaction in between, kill -9, replay."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import numpy as np
import pytest

from tailbudget.serve.batch import Batch
from tailbudget.serve.runtime import Runtime
from tailbudget.serve.wal import StageColumn
from tests.control.runtimes import crash, runtime

T0 = 1_800_000_000.0
THREADS = 8
BATCHES = 25


def _state(rt: Runtime) -> tuple[object, ...]:
    return (
        rt.seq,
        rt.observations_total,
        rt.errors_total,
        dict(rt.stage_observations),
        rt.controller.window.to_state(),
        rt.stage_windows.to_state(),
    )


def test_concurrent_batches_share_fsyncs_and_every_ack_survives_a_restart(tmp_path, monkeypatch):
    rt = runtime(tmp_path)
    fsyncs: list[int] = []  # only the log fdatasyncs; snapshots and the journal fsync
    real = os.fdatasync

    def disk_like(fd: int) -> None:
        fsyncs.append(fd)
        # As long as a disk's fsync: batches arriving meanwhile queue behind it.
        # Nothing is asserted about time; this only makes the overlap the rule.
        time.sleep(0.002)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", disk_like)
    acked = Counter[str]()
    lock = threading.Lock()
    failures: list[BaseException] = []

    def client(k: int) -> None:
        rng = np.random.default_rng(k)
        try:
            for i in range(BATCHES):
                n = 1 + (k + i) % 9
                ts = T0 + rng.uniform(0, 8, n)
                total = rng.lognormal(5, 0.7, n)
                err = rng.random(n) < 0.2
                rows = np.flatnonzero(rng.random(n) < 0.7)
                stages = {
                    "llm": StageColumn(np.arange(n, dtype=np.int64), total * 0.6),
                    f"tool{k % 3}": StageColumn(rows.astype(np.int64), total[rows] * 0.3),
                }
                assert rt.ingest(Batch(ts, total, err, stages)) == n
                with lock:  # acknowledged: counted only after ingest returned
                    acked["obs"] += n
                    acked["errors"] += int(err.sum())
                    acked["llm"] += n
                    acked[f"tool{k % 3}"] += len(rows)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=client, args=(k,)) for k in range(THREADS)]
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):  # snapshots taken between the commits
        rt.compact()
        time.sleep(0.005)
    for w in workers:
        w.join()
    assert not failures
    batches = THREADS * BATCHES
    assert rt.state.wal.appended == batches and rt.status(T0 + 9)["wal"]["batches"] == batches
    assert len(fsyncs) == rt.state.wal.fsyncs < batches  # batches shared fsyncs
    assert rt.observations_total == acked["obs"] and rt.errors_total == acked["errors"]
    before = _state(rt)
    snap = rt.state.load_snapshot()
    assert snap is not None
    logged = [b.seq for b in rt.state.wal.batches()]
    # The log continues exactly where the snapshot ends: no gap, no overlap.
    assert logged == list(range(int(snap["seq"]) + 1, rt.seq + 1))
    crash(rt)
    again = runtime(tmp_path)
    assert again.observations_total == acked["obs"] and again.errors_total == acked["errors"]
    stages = {k: v for k, v in acked.items() if k not in ("obs", "errors")}
    assert dict(again.stage_observations) == stages
    assert _state(again) == before  # replay rebuilt the very same windows
    again.close()


def test_a_failed_fsync_answers_an_error_and_leaves_the_state_as_it_was(tmp_path, monkeypatch):
    rt = runtime(tmp_path)
    rt.ingest(Batch(np.full(5, T0), np.full(5, 100.0), np.zeros(5, dtype=bool)))
    before = _state(rt)

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        rt.ingest(Batch(np.full(3, T0), np.full(3, 900.0), np.ones(3, dtype=bool)))
    assert _state(rt) == before  # not durable, so not counted and not in the windows
    monkeypatch.undo()
    rt.ingest(Batch(np.full(2, T0), np.full(2, 200.0), np.zeros(2, dtype=bool)))
    after = _state(rt)
    crash(rt)
    again = runtime(tmp_path)
    assert again.observations_total == 7 and _state(again) == after
    again.close()
