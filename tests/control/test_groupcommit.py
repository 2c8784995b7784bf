"""Group commit: concurrent batches share one fsync, are applied in order, fail together.

No timing: where a test needs batches to queue behind an fsync, the fsync waits
(with a generous deadline) until they have queued.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from tailbudget.serve.batch import Batch
from tailbudget.serve.groupcommit import GroupCommit
from tailbudget.serve.wal import Batch as LoggedBatch
from tailbudget.serve.wal import ObservationLog


def _cols(k: int, n: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.full(n, 1e9 + k), np.full(n, float(k)), np.zeros(n, dtype=bool)


def _wait_until(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.001)


class _Applied:
    def __init__(self) -> None:
        self.groups: list[list[int]] = []
        self.values: dict[int, float] = {}

    def __call__(self, batches: Sequence[LoggedBatch]) -> None:
        self.groups.append([b.seq for b in batches])
        for b in batches:
            self.values[b.seq] = float(b.total_ms[0])


def _gate_first_fsync(
    monkeypatch: pytest.MonkeyPatch, commit: GroupCommit, callers: int, fail_second: bool
) -> list[int]:
    """The first fdatasync holds until every other caller queued behind it; counts calls."""
    calls: list[int] = []
    real = os.fdatasync

    def gated(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:  # its own group is written (readable), the rest must queue
            _wait_until(lambda: commit.queued + len(list(commit.wal.batches())) == callers)
        elif fail_second and len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", gated)
    return calls


def _run(commit: GroupCommit, k: int, results: dict[int, object]) -> None:
    try:
        results[k] = commit.commit(Batch(*_cols(k)))
    except OSError as exc:
        results[k] = exc


def test_batches_queued_behind_an_fsync_share_the_next_one(tmp_path, monkeypatch):
    wal = ObservationLog(tmp_path / "wal")
    applied = _Applied()
    commit = GroupCommit(wal, applied, last_seq=10)
    threads_n = 12
    calls = _gate_first_fsync(monkeypatch, commit, threads_n, fail_second=False)
    results: dict[int, object] = {}
    threads = [threading.Thread(target=_run, args=(commit, k, results)) for k in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    # The first leader's fsync covered its group (its own batch, and any that queued
    # before it took the queue); all the others queued behind that fsync, and the
    # next leader made them durable with one more.
    assert len(calls) == 2 and wal.fsyncs == 2 and wal.appended == threads_n
    assert sorted(results.values()) == list(range(11, 11 + threads_n))  # type: ignore[type-var]
    assert len(applied.groups) == 2 and sum(len(g) for g in applied.groups) == threads_n
    flat = [s for g in applied.groups for s in g]
    assert flat == sorted(flat) and commit.last_seq == 10 + threads_n
    # every caller got the number its own batch was logged and applied under
    logged = {b.seq: float(b.total_ms[0]) for b in wal.batches()}
    assert logged == applied.values
    assert all(logged[seq] == k for k, seq in results.items())  # type: ignore[index]
    wal.close()


def test_a_failed_fsync_fails_every_batch_of_its_group_and_applies_none(tmp_path, monkeypatch):
    wal = ObservationLog(tmp_path / "wal")
    applied = _Applied()
    commit = GroupCommit(wal, applied, last_seq=0)
    calls = _gate_first_fsync(monkeypatch, commit, 6, fail_second=True)
    results: dict[int, object] = {}
    threads = [threading.Thread(target=_run, args=(commit, k, results)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    failed = sorted(k for k, r in results.items() if isinstance(r, OSError))
    first = applied.groups[0]
    assert len(calls) == 2 and len(failed) == 6 - len(first) > 0
    assert all(results[k].errno == errno.ENOSPC for k in failed)  # type: ignore[union-attr]
    assert applied.groups == [first]  # only the first group was durable, so only it applied
    assert [b.seq for b in wal.batches()] == first
    assert sorted(applied.values.values()) == sorted(set(range(6)) - set(failed))
    # The next batch goes on normally; the failed numbers are never reused.
    assert commit.commit(Batch(*_cols(99))) == 7
    assert [b.seq for b in wal.batches()] == [*first, 7] and applied.groups[-1] == [7]
    wal.close()


def test_exclusive_holds_commits_off_until_it_is_left(tmp_path):
    wal = ObservationLog(tmp_path / "wal")
    applied = _Applied()
    commit = GroupCommit(wal, applied, last_seq=0)
    results: dict[int, object] = {}
    with commit.exclusive():
        worker = threading.Thread(target=_run, args=(commit, 1, results))
        worker.start()
        _wait_until(lambda: commit.queued == 1)
        assert commit.queued == 1 and not applied.groups and wal.size() == 0
    worker.join(60)
    assert results == {1: 1} and applied.groups == [[1]]
    wal.close()


def test_an_apply_error_reaches_every_caller_of_the_group(tmp_path):
    wal = ObservationLog(tmp_path / "wal")

    def broken(batches: Sequence[LoggedBatch]) -> None:
        raise ValueError("bug in apply")

    commit = GroupCommit(wal, broken, last_seq=0)
    with pytest.raises(ValueError, match="bug in apply"):
        commit.commit(Batch(*_cols(1)))
    # durable though not applied: a restart replays it (nothing acknowledged is lost)
    assert [b.seq for b in wal.batches()] == [1]
    wal.close()
