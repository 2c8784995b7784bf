"""The write-ahead log of acknowledged spans (`spans.log` in the state dir).

Record kinds: the spans of one request (written and fsynced before its 2xx) as the request's own
protobuf (decompressed: no encoding on the way in, and read back by protobuf's C
decoder) or, from a JSON request or a rewrite, as JSON span rows; and the ids of traces
whose attribution reached the observation log (after that log's own fsync), with the
receiver's counts and the culprits' window rows they added (`carried.py`; a rewrite
starts with them). On a restart the spans of traces not marked done are the open traces
to finish: the log is first rewritten to them a record at a time (streamed, so a long
log never sits in memory whole), and the receiver holds the first of those records and
parks the rest. Each record: magic, kind, payload bytes, crc32 of the payload. Reading
stops at the first record whose checksum fails: a torn tail is a write that was never
acknowledged, dropped before appending. `rewrite` keeps only open traces' spans (atomic
rename), so the file stays about as large as what is open.

Group commit: a record is written (buffered) first and made durable by `sync`, one
fdatasync at a time; requests whose records were written while one was in flight share
the next, so N concurrent requests cost about one fsync, not N in turn (as observations
do in serve/groupcommit.py). Nobody returns before an fsync that began after its
write returned.
"""

from __future__ import annotations

import functools
import os
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from tailbudget.logs.span_model import SpanRow
from tailbudget.serve.traces.otlp_body import protobuf_spans

__all__ = ["SpanLog"]

_HEAD = struct.Struct("<4sBII")
_MAGIC = b"TBS1"
_SPANS = 1
_DONE = 2
_PROTOBUF = 3
"""A protobuf request as it came (written before the receive time was kept: read back
against the clock of the reading)."""
_PROTOBUF_AT = 5
"""A protobuf request after the time it was received (u8 epoch ns): read back against
that clock, so it gives exactly the spans its 2xx counted."""
_RECEIVED = struct.Struct("<Q")
_SPAN_KINDS = (_SPANS, _PROTOBUF, _PROTOBUF_AT)
_DONE_STATE = 6
"""Trace ids done (JSON `ids`), with the receiver's counts after them (`counts`) and the
rows they added to the culprits' window (`rows`): the same fsync makes both durable,
so the counts and the culprits' evidence come back after kill -9 as the traces do."""
_STATE = 7
"""At the head of a rewritten log: the counts and the window's rows it carried over."""
STATE_ROWS = 20_000
"""Window rows carried over at most (the culprits' window holds no more: MAX_ROWS)."""
_RECORD_ROWS = 4_096
"""Spans per record when the log is rewritten at start-up (the unit held or parked)."""
_row = functools.partial(tuple.__new__, SpanRow)
"""A SpanRow from its fields, without NamedTuple's keyword __new__ (mapped in C)."""
_FIELDS = len(SpanRow._fields)


def _record(kind: int, payload: bytes) -> bytes:
    return _HEAD.pack(_MAGIC, kind, len(payload), zlib.crc32(payload)) + payload


def _spans_payload(rows: Iterable[SpanRow]) -> bytes:
    return orjson.dumps(list(rows), default=tuple)


def _rows(
    kind: int, payload: bytes, folded: dict[str, int] | None = None, class_key: str | None = None
) -> list[SpanRow]:
    if kind == _PROTOBUF_AT:
        (received,) = _RECEIVED.unpack_from(payload)
        return protobuf_spans(payload[_RECEIVED.size :], received, folded, class_key)
    if kind == _PROTOBUF:
        return protobuf_spans(payload, time.time_ns(), folded, class_key)
    rows = orjson.loads(payload)
    if rows and len(rows[0]) < _FIELDS:  # written before spans carried a class: none
        return [_row([*r, ""]) for r in rows]
    return list(map(_row, rows))


class SpanLog:
    """Append-only, fsynced; `open_spans` replays what is not done yet."""

    NAME = "spans.log"

    def __init__(self, root: Path, class_key: str | None = None) -> None:
        self.path = root / self.NAME
        self.class_key = class_key
        """The root span attribute holding a trace's class (read as records are read)."""
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        """Held by the one fsync in flight (and by `rewrite`); waiters share the next."""
        self._written = 0
        self._synced = 0
        self.torn_bytes = 0
        self.fsyncs = 0
        self.carried: dict[str, Any] = {"counts": {}, "rows": []}
        """The counts and window rows the log held at start-up (`_DONE_STATE`, `_STATE`)."""
        self._open_records = self._compact()
        self._fh = open(self.path, "ab")  # noqa: SIM115 - held open for appends

    def open_records(self) -> list[tuple[int, int]]:
        """(offset, spans) of the records of traces acknowledged but not yet attributed,
        found at start-up (given once): read each with `spans_at`."""
        records, self._open_records = self._open_records, []
        return records

    def open_spans(self) -> list[SpanRow]:
        """Every span of those records at once (small logs and tests)."""
        return [row for offset, _ in self.open_records() for row in self.spans_at(offset)]

    def _intact(self) -> Iterator[tuple[int, bytes]]:
        """(kind, payload) of each record up to the first torn one; counts the torn bytes."""
        size = self.path.stat().st_size
        pos = 0
        with open(self.path, "rb") as fh:
            while True:
                head = fh.read(_HEAD.size)
                if len(head) < _HEAD.size:
                    break
                magic, kind, length, crc = _HEAD.unpack(head)
                payload = fh.read(length)
                if magic != _MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
                    break
                pos += _HEAD.size + length
                yield kind, payload
        self.torn_bytes = size - pos

    def _compact(self) -> list[tuple[int, int]]:
        """The log rewritten to its open traces' spans, `_RECORD_ROWS` a record (one
        record in memory at a time); their (offset, spans)."""
        if not self.path.exists():
            return []
        done: set[str] = set()
        window: deque[Any] = deque(maxlen=STATE_ROWS)
        for kind, payload in self._intact():
            if kind == _DONE:
                done.update(orjson.loads(payload))
            elif kind in (_DONE_STATE, _STATE):
                self._carry(orjson.loads(payload), done, window)
        self.carried["rows"] = list(window)
        tmp = self.path.with_suffix(".tmp")
        records: list[tuple[int, int]] = []
        with open(tmp, "wb") as out:
            out.write(_record(_STATE, orjson.dumps(self.carried)))
            pending: list[list[object]] = []
            for kind, payload in self._intact():
                if kind in _SPAN_KINDS:
                    rows = _rows(kind, payload, class_key=self.class_key)
                    pending.extend(list(r) for r in rows if r[0] not in done)
                while len(pending) >= _RECORD_ROWS:
                    records.append((out.tell(), len(pending[:_RECORD_ROWS])))
                    out.write(_record(_SPANS, orjson.dumps(pending[:_RECORD_ROWS])))
                    del pending[:_RECORD_ROWS]
            if pending:
                records.append((out.tell(), len(pending)))
                out.write(_record(_SPANS, orjson.dumps(pending)))
            out.flush()
            os.fsync(out.fileno())
        self._replace(tmp)
        return records

    def _carry(self, doc: Any, done: set[str], rows: deque[Any]) -> None:
        """One `_DONE_STATE` or `_STATE` record read at start-up (a malformed one is
        skipped: the counts are a report, the ids the only thing replay depends on)."""
        if not isinstance(doc, dict):
            return
        ids, counts, new = doc.get("ids"), doc.get("counts"), doc.get("rows")
        if isinstance(ids, list):
            done.update(i for i in ids if isinstance(i, str))
        if isinstance(counts, dict):
            self.carried["counts"] = counts
        if isinstance(new, list):
            rows.extend(new)

    def _replace(self, tmp: Path) -> None:
        """`tmp` becomes the log, durably (rename, then the directory fsynced)."""
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def append_spans(self, rows: list[SpanRow]) -> None:
        """Durable before returning (the request's 2xx waits for it)."""
        self.sync(self.write_spans(rows))

    def write_spans(self, rows: list[SpanRow]) -> int:
        """Written, not yet durable: the ticket to pass to `sync` before the 2xx."""
        return self._write(_record(_SPANS, _spans_payload(rows)))[0]

    def write_spans_at(self, rows: list[SpanRow]) -> tuple[int, int]:
        """`write_spans`, and where the record starts (to read its spans back later)."""
        return self._write(_record(_SPANS, _spans_payload(rows)))

    def write_protobuf_at(self, request: bytes, received_ns: int) -> tuple[int, int]:
        """`write_spans_at` for a protobuf request's spans: the request itself is kept,
        with the clock its spans were checked against."""
        return self._write(_record(_PROTOBUF_AT, _RECEIVED.pack(received_ns) + request))

    def spans_at(self, offset: int, folded: dict[str, int] | None = None) -> list[SpanRow]:
        """The spans of the record written at `offset` (by `write_spans_at` or
        `write_protobuf_at`); the names folded into `other` as the rows are made (a
        protobuf request's) are added to `folded`."""
        with open(self.path, "rb") as fh:
            fh.seek(offset)
            magic, kind, size, crc = _HEAD.unpack(fh.read(_HEAD.size))
            payload = fh.read(size)
        if magic != _MAGIC or kind not in _SPAN_KINDS or zlib.crc32(payload) != crc:
            raise OSError(f"{self.path}: no span record at offset {offset}")
        return _rows(kind, payload, folded, self.class_key)

    def mark_done(self, traces: list[str], state: dict[str, Any] | None = None) -> None:
        """These traces are in the observation log: never replay them. `state`: the
        receiver's counts after them and their window rows, made durable with them."""
        if not traces:
            return
        if state is None:
            record = _record(_DONE, orjson.dumps(traces))
        else:
            record = _record(_DONE_STATE, orjson.dumps({"ids": traces, **state}))
        self.sync(self._write(record)[0])

    def _write(self, record: bytes) -> tuple[int, int]:
        with self._lock:
            offset = self._fh.tell()
            self._fh.write(record)
            self._fh.flush()
            self._written += 1
            return self._written, offset

    def sync(self, ticket: int) -> None:
        """Return once the record numbered `ticket` is on disk (one fsync for all the
        records written while the previous one ran)."""
        with self._sync_lock:
            if self._synced >= ticket:  # an fsync begun after our write covered it
                return
            with self._lock:
                upto = self._written
                fd = self._fh.fileno()
            os.fdatasync(fd)  # outside `_lock`: writers go on filling the next group
            self._synced = upto
            self.fsyncs += 1

    def size(self) -> int:
        with self._lock:
            return self._fh.tell()

    def rewrite(self, open_rows: Iterable[SpanRow], state: dict[str, Any] | None = None) -> None:
        """Replace the log by one record of the open traces' spans (write, fsync, rename),
        after the receiver's `state` (counts and window rows) when given.

        The caller holds off appends whose spans would be missed (the receiver's lock)."""
        tmp = self.path.with_suffix(".tmp")
        with self._sync_lock, self._lock:
            with open(tmp, "wb") as fh:
                if state is not None:
                    fh.write(_record(_STATE, orjson.dumps(state)))
                rows = list(open_rows)
                if rows:
                    fh.write(_record(_SPANS, _spans_payload(rows)))
                fh.flush()
                os.fsync(fh.fileno())
            self._replace(tmp)
            self._fh.close()
            self._fh = open(self.path, "ab")  # noqa: SIM115
            self._synced = self._written  # every record written so far is in the new file

    def close(self) -> None:
        with self._lock:
            self._fh.close()
