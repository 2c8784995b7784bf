"""The write-ahead log of acknowledged spans (`spans.log` in the state dir).

Two record kinds: the spans of one request (written and fsynced before its 2xx),
and the ids of traces whose attribution reached the observation log (after that
log's own fsync). On a restart the spans of traces not marked done are the open
traces to finish. Each record: magic, kind, payload bytes, crc32 of the payload;
the payload is JSON. Reading stops at the first record whose checksum fails: a
torn tail is a write that was never acknowledged, cut before appending.
`rewrite` keeps only open traces' spans (atomic rename), so the file stays about
as large as what is open.

Group commit: a record is written (buffered) first and made durable by `sync`, one
fdatasync at a time; requests whose records were written while one was in flight share
the next, so N concurrent requests cost about one fsync, not N in turn (as observations
do in control/groupcommit.py). Nobody returns before an fsync that began after its
write returned.
"""

from __future__ import annotations

import functools
import os
import struct
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path

import orjson

from tailbudget.control.traces.otlp_body import SpanRow

__all__ = ["SpanLog"]

_HEAD = struct.Struct("<4sBII")
_MAGIC = b"TBS1"
_SPANS = 1
_DONE = 2
_row = functools.partial(tuple.__new__, SpanRow)
"""A SpanRow from its fields, without NamedTuple's keyword __new__ (mapped in C)."""


def _record(kind: int, payload: bytes) -> bytes:
    return _HEAD.pack(_MAGIC, kind, len(payload), zlib.crc32(payload)) + payload


def _spans_payload(rows: Iterable[SpanRow]) -> bytes:
    return orjson.dumps(list(rows), default=tuple)


class SpanLog:
    """Append-only, fsynced; `open_spans` replays what is not done yet."""

    NAME = "spans.log"

    def __init__(self, root: Path) -> None:
        self.path = root / self.NAME
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        """Held by the one fsync in flight (and by `rewrite`); waiters share the next."""
        self._written = 0
        self._synced = 0
        self.torn_bytes = 0
        self.fsyncs = 0
        recovered, end = self._read()
        self._recovered = recovered
        if self.path.exists() and end < self.path.stat().st_size:
            self.torn_bytes = self.path.stat().st_size - end
            with open(self.path, "r+b") as fh:
                fh.truncate(end)
        self._fh = open(self.path, "ab")  # noqa: SIM115 - held open for appends

    def open_spans(self) -> list[SpanRow]:
        """Spans of traces acknowledged but not yet attributed (read at start-up)."""
        rows, self._recovered = self._recovered, []
        return rows

    def _read(self) -> tuple[list[SpanRow], int]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [], 0
        spans: list[SpanRow] = []
        done: set[str] = set()
        pos = 0
        while pos + _HEAD.size <= len(data):
            magic, kind, size, crc = _HEAD.unpack_from(data, pos)
            payload = data[pos + _HEAD.size : pos + _HEAD.size + size]
            if magic != _MAGIC or len(payload) != size or zlib.crc32(payload) != crc:
                break
            value = orjson.loads(payload)
            if kind == _SPANS:
                spans.extend(map(_row, value))
            elif kind == _DONE:
                done.update(value)
            pos += _HEAD.size + size
        return [row for row in spans if row.trace not in done], pos

    def append_spans(self, rows: list[SpanRow]) -> None:
        """Durable before returning (the request's 2xx waits for it)."""
        self.sync(self.write_spans(rows))

    def write_spans(self, rows: list[SpanRow]) -> int:
        """Written, not yet durable: the ticket to pass to `sync` before the 2xx."""
        return self._write(_record(_SPANS, _spans_payload(rows)))[0]

    def write_spans_at(self, rows: list[SpanRow]) -> tuple[int, int]:
        """`write_spans`, and where the record starts (to read its spans back later)."""
        return self._write(_record(_SPANS, _spans_payload(rows)))

    def spans_at(self, offset: int) -> list[SpanRow]:
        """The spans of the record written at `offset` (one `write_spans_at` made)."""
        with open(self.path, "rb") as fh:
            fh.seek(offset)
            magic, kind, size, crc = _HEAD.unpack(fh.read(_HEAD.size))
            payload = fh.read(size)
        if magic != _MAGIC or kind != _SPANS or zlib.crc32(payload) != crc:
            raise OSError(f"{self.path}: no span record at offset {offset}")
        return list(map(_row, orjson.loads(payload)))

    def mark_done(self, traces: list[str]) -> None:
        """These traces are in the observation log: never replay them."""
        if traces:
            self.sync(self._write(_record(_DONE, orjson.dumps(traces)))[0])

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

    def rewrite(self, open_rows: Iterable[SpanRow]) -> None:
        """Replace the log by one record of the open traces' spans (write, fsync, rename).

        The caller holds off appends whose spans would be missed (the receiver's lock)."""
        tmp = self.path.with_suffix(".tmp")
        with self._sync_lock, self._lock:
            with open(tmp, "wb") as fh:
                rows = list(open_rows)
                if rows:
                    fh.write(_record(_SPANS, _spans_payload(rows)))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._fh.close()
            self._fh = open(self.path, "ab")  # noqa: SIM115
            self._synced = self._written  # every record written so far is in the new file

    def close(self) -> None:
        with self._lock:
            self._fh.close()
