"""Sink protocol and the pump: a bounded queue drained by one writer thread.

The request path only appends to a `collections.deque` (atomic under the GIL)
after a length check (`Request.__exit__` does it inline and wakes the writer
every `batch_size` records); a full queue counts the record as dropped
instead of blocking. The writer thread wakes every `flush_interval_s` (or when a batch
is ready), resolves records (sums, clocks, ids) once per batch, and hands the
batch to every sink. A sink that fails is logged and its records counted as
dropped for that sink; other sinks still get them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tailbudget.measure.columns import Block, blocks
from tailbudget.measure.record import Clock, IsoTime, Record, to_rows

if TYPE_CHECKING:
    from tailbudget.budget import Budget

log = logging.getLogger("tailbudget.measure")


class Batch:
    """Finished records with the clock that maps their stamps to epoch time.

    `raw` holds the records as the request path queued them: plain tuples in
    `Record` field order (an exact tuple of atomic values is what the cyclic
    GC stops tracking; a NamedTuple instance it tracks forever). `records`
    gives them as `Record`s; `blocks` (same-shape records as columns) is built
    once per batch by the writer; `rows` (one dict per record, audit column
    names, batch order) is built from them on first use and shared by sinks.
    """

    __slots__ = ("_blocks", "_iso", "_records", "_repeated", "_rows", "clock", "prefix", "raw")

    def __init__(
        self,
        records: Sequence[tuple[Any, ...]],
        clock: Clock,
        prefix: str,
        repeated: set[str],
        iso: IsoTime | None = None,
    ) -> None:
        self.raw = records
        self._records: list[Record] | None = None
        self.clock = clock
        self.prefix = prefix
        self._repeated = repeated
        self._iso = iso
        self._rows: list[dict[str, Any]] | None = None
        self._blocks: tuple[list[Block], list[dict[str, Any]], list[int]] | None = None

    @property
    def records(self) -> list[Record]:
        """The batch's records as `Record` named tuples (built on first use)."""
        if self._records is None:
            self._records = list(map(Record._make, self.raw))
        return self._records

    @property
    def blocks(self) -> tuple[list[Block], list[dict[str, Any]], list[int]]:
        """(columnar blocks, rows of the other records, their positions in the batch)."""
        if self._blocks is None:
            clock = self.clock
            offset = clock.wall_ns - clock.perf_ns
            known = len(self._repeated)
            found, rest = blocks(self.raw, offset, self.prefix, self._repeated)
            odd = [Record._make(self.raw[i]) for i in rest]
            rows = to_rows(odd, clock, self.prefix, self._repeated, self._iso) if odd else []
            if len(self._repeated) != known and found:
                # A stage repeated for the first time: its count column joins the blocks too.
                found, _ = blocks(self.raw, offset, self.prefix, self._repeated)
            self._blocks = (found, rows, rest)
        return self._blocks

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One dict per request: request_id, ts (ISO-8601 UTC), total_ms, <stage>_ms, ..."""
        if self._rows is None:
            found, odd, rest = self.blocks
            if len(found) == 1 and not odd:
                self._rows = found[0].rows()
            else:
                out: list[Any] = [None] * len(self.raw)
                for block in found:
                    for pos, row in zip(block.positions, block.rows(), strict=True):
                        out[pos] = row
                for pos, row in zip(rest, odd, strict=True):
                    out[pos] = row
                self._rows = out
        return self._rows

    def __len__(self) -> int:
        return len(self.raw)


class Sink:
    """Where finished requests go. Subclasses implement `write`; all run in the writer thread."""

    name = "sink"

    def bind(self, service: str, budget: Budget | None) -> None:
        """Called once by the Recorder before the first write."""

    def write(self, batch: Batch) -> None:
        """Write a batch (never called concurrently)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Make what was written durable/visible."""

    def close(self) -> None:
        """Flush and release resources; called once."""
        self.flush()


class Pump:
    """Bounded queue + background writer thread feeding a list of sinks."""

    def __init__(
        self,
        sinks: Sequence[Sink],
        *,
        capacity: int,
        batch_size: int,
        flush_interval_s: float,
        id_prefix: str,
        on_drop: Callable[[str, int], None],
    ) -> None:
        self.sinks = list(sinks)
        self.capacity = capacity
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.id_prefix = id_prefix
        self._on_drop = on_drop
        self._q: deque[tuple[Any, ...]] = deque()
        self.queue = self._q
        self._wake = threading.Event()
        self.wake = self._wake.set
        self._idle = threading.Condition()
        self._busy = False
        self._stop = False
        self._repeated: set[str] = set()
        self._iso = IsoTime()
        self.written = 0
        self._inflight = 0
        self._thread = threading.Thread(target=self._run, name="tailbudget-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            stopping = self._stop
            with self._idle:
                self._busy = True
            try:
                self._drain()
            finally:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()
            if stopping and not self._q:
                return

    def _drain(self) -> None:
        q = self._q
        pop = q.popleft
        while q:
            # Only this thread pops, so the queue holds at least len(q) records now.
            records: list[tuple[Any, ...]] = [pop() for _ in range(min(len(q), self.batch_size))]
            self._inflight = len(records)
            self._deliver(records)
            self._inflight = 0

    def _deliver(self, records: list[tuple[Any, ...]]) -> None:
        clock = Clock(time.time_ns(), time.perf_counter_ns())
        batch = Batch(records, clock, self.id_prefix, self._repeated, self._iso)
        try:
            _ = batch.blocks  # build once here so a bad record cannot fail every sink
        except Exception:
            log.exception("tailbudget: could not flatten %d records; dropped", len(records))
            self._on_drop("flatten", len(records))
            return
        for sink in self.sinks:
            try:
                sink.write(batch)
            except Exception:
                log.exception("tailbudget: sink %s failed on %d records", sink.name, len(batch))
                self._on_drop(sink.name, len(batch))
        self.written += len(records)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Block until everything queued now has reached the sinks, then flush them."""
        deadline = time.monotonic() + timeout_s
        while (self._q or self._busy) and time.monotonic() < deadline:
            self._wake.set()
            with self._idle:
                self._idle.wait(0.05)
        for sink in self.sinks:
            try:
                sink.flush()
            except Exception:
                log.exception("tailbudget: sink %s failed to flush", sink.name)

    def close(self, timeout_s: float = 30.0) -> None:
        """Drain the queue, stop the thread and close every sink."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            left = len(self._q) + self._inflight
            log.warning(
                "tailbudget: writer still busy after %.0fs at close; %d records may be lost",
                timeout_s,
                left,
            )
            self._on_drop("close", left)
            return  # the sinks stay open: the writer thread is still using them
        else:
            self._drain()  # a put that raced the stop flag lands here, not on the floor
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                log.exception("tailbudget: sink %s failed to close", sink.name)
