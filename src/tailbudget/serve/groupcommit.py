"""Group commit: batches that arrive while an fsync is in flight share the next one.

Why: every accepted batch must be fsynced before its 200, and one fsync per
batch, taken in turn, makes concurrent clients queue behind the disk: N
batches in flight cost N fsyncs back to back. An fsync costs about the same
for one record as for twenty, so the batches that arrive while one is in
flight are written together and made durable by ONE fsync.

How: leader/follower on a condition variable, with no thread of its own (so
nothing to start, stop or lose on shutdown). A caller queues its batch; if no
commit is in flight it becomes the leader: it takes the whole queue, numbers
the batches in queue order, writes them with one write, fdatasyncs once, hands
them to `apply` (the runtime feeds its windows) and wakes the others. A
follower sleeps until the group holding its batch is done, or until it is its
turn to lead. Nobody returns before the fsync covering its bytes returned, and
a failed write or fsync fails every batch of its group: none is applied and
the log is cut back, so acknowledged == applied == logged.

Numbering, writing and applying happen in one order under one token, which
`exclusive()` (compaction) also takes: a snapshot never falls between a
batch's write and its apply, so the snapshot's sequence number and the log
always agree, and replaying the log applies the same batches in the same order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from tailbudget.serve import wal
from tailbudget.serve.batch import Batch

__all__ = ["GroupCommit"]


class _Entry:
    """One caller's batch while it waits; written only by the leader of its group."""

    __slots__ = ("batch", "done", "error", "seq")

    def __init__(self, batch: wal.Batch) -> None:
        self.batch = batch
        self.done = False
        self.seq = 0
        self.error: BaseException | None = None


def _raise_for(entry: _Entry, leader: bool) -> None:
    exc = entry.error
    if exc is None:
        return
    if leader:
        raise exc
    # Followers raise a copy: one exception object raised in many threads would
    # grow one traceback from all of them. OSError keeps its errno (503 upstream).
    if isinstance(exc, OSError):
        raise OSError(exc.errno, exc.strerror or str(exc)) from exc
    raise RuntimeError(f"the group commit failed: {exc!r}") from exc


class GroupCommit:
    """Makes batches durable in groups, then applies them, in sequence-number order."""

    def __init__(
        self,
        log: wal.ObservationLog,
        apply: Callable[[Sequence[wal.Batch]], None],
        last_seq: int,
    ) -> None:
        self.wal = log
        self.apply = apply
        """Called by the leader with each durable group, in order, before anyone returns."""
        self.last_seq = last_seq
        self._cond = threading.Condition()
        self._queue: list[_Entry] = []
        self._busy = False  # the token: a leader (or `exclusive`) is writing

    @property
    def queued(self) -> int:
        """Batches waiting for the next fsync."""
        with self._cond:
            return len(self._queue)

    def commit(self, batch: Batch) -> int:
        """Make a batch durable and applied; returns its sequence number.

        Raises wal.Unwritable, before queueing, for a batch the log cannot encode: one
        such batch fails alone, never the group it would have joined. Labels are not
        logged: the runtime has made them class columns."""
        logged = wal.Batch(0, batch.ts, batch.total_ms, batch.error, batch.stages, batch.series)
        wal.check_writable(logged)
        entry = _Entry(logged)
        with self._cond:
            self._queue.append(entry)
            while self._busy and not entry.done:
                self._cond.wait()
            if entry.done:  # a leader wrote it while we slept
                _raise_for(entry, leader=False)
                return entry.seq
            self._busy = True
            group, self._queue = self._queue, []
        try:
            self._write(group)
        finally:
            with self._cond:
                for e in group:
                    e.done = True
                self._busy = False
                self._cond.notify_all()
        _raise_for(entry, leader=True)
        return entry.seq

    def _write(self, group: list[_Entry]) -> None:
        first = self.last_seq + 1
        batches = [replace(e.batch, seq=first + i) for i, e in enumerate(group)]
        # Numbers are spent even if the write fails: should cutting the failed bytes
        # off fail too, a record left behind never shares its number with a later one.
        self.last_seq = batches[-1].seq
        try:
            self.wal.append_many(batches)
            self.apply(batches)
        except BaseException as exc:
            for e in group:
                e.error = exc
            return
        for e, b in zip(group, batches, strict=True):
            e.seq = b.seq

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold off commits (none in flight, none starts) while the block runs."""
        with self._cond:
            while self._busy:
                self._cond.wait()
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
