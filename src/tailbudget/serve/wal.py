"""The write-ahead log of observation batches: binary records, CRC-checked, fsynced.

Four record kinds, told apart by their magic:

- `TBW3` (written today): header (magic, seq, count, payload bytes, crc32 of
  the payload, crc32 of the header before it) then the payload: the columns ts
  (f8), total_ms (f8) and error (u1), then the stage block (the rest of the
  payload). The header's own checksum means a damaged record is recognised as
  such before its length is trusted.
- `TBW1` (read only): header (magic, seq, count, crc32) then the three columns.
- `TBW2` (read only): as TBW1 plus the byte length of a stage block after the
  header. Stage block, in TBW2 and TBW3: for each stage the name length (u2),
  count (u4), the UTF-8 name, the rows it belongs to (u4 indexes into the
  batch) and its milliseconds (f8).
- `TBW4` (read only): as TBW3, but after the columns the byte length of the
  stage block (u4), the stage block, then the series block (ttft, tpot, itl;
  the stage block's layout, a row may appear more than once: one inter-token
  gap each).
- `TBW5` (written for batches with LLM series): as TBW4, but each column's
  head carries a flags byte after its count (name length u2, count u4, flags
  u1, name): flag 1 means the column covers every row of the batch in order,
  and its row indexes are not stored (the common case: every request sent its
  ttft), so a value costs 8 bytes instead of 12. Batches without series stay
  TBW3, so a log of plain observations reads as before.

`append_many` writes several records with one write and makes them durable
with one fdatasync (the group commit in `tailbudget.serve.groupcommit`).

Reading (`read`) never stops at the first bad record: after one it looks for
the next record whose checksums hold, so one flipped byte costs the records it
touches, not every record after it. What it skipped is reported
(`Corruption`: where, how many bytes, how many batches by their sequence
numbers); bytes after the last intact record are a torn tail, a write that
was never acknowledged, which `cut` removes before new records are appended.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tailbudget.control.columns import StageColumn

__all__ = [
    "Batch",
    "Corruption",
    "LogContents",
    "ObservationLog",
    "StageColumn",
    "Unwritable",
    "check_writable",
]

_MAGIC = b"TBW1"
_MAGIC_STAGES = b"TBW2"
_MAGIC_V3 = b"TBW3"
_MAGIC_V4 = b"TBW4"
_MAGIC_V5 = b"TBW5"
_MAGICS = (_MAGIC, _MAGIC_STAGES, _MAGIC_V3, _MAGIC_V4, _MAGIC_V5)
_BLOCKED = (_MAGIC_V4, _MAGIC_V5)  # a stage block length, then stages, then series
_HEADER = struct.Struct("<4sQII")  # TBW1/TBW2: magic, seq, count, crc32 of the payload
_STAGE_LEN = struct.Struct("<I")  # TBW2 only, right after the header: stage block bytes
_HEADER_V3 = struct.Struct("<4sQIII")  # magic, seq, count, payload bytes, payload crc32
_HEADER_CRC = struct.Struct("<I")  # TBW3: crc32 of the header fields above
_V3_SIZE = _HEADER_V3.size + _HEADER_CRC.size
_STAGE_HEAD = struct.Struct("<HI")  # name bytes, observations
_COLUMN_HEAD = struct.Struct("<HIB")  # TBW5: name bytes, observations, flags
_DENSE = 1  # flags: the column is rows 0..n-1 in order; no indexes stored
_MAX_BATCH = 10_000_000
_MAX_PAYLOAD = 1 << 31


@dataclass(frozen=True, slots=True)
class Batch:
    """One acknowledged batch of observations, as columns."""

    seq: int
    ts: npt.NDArray[np.float64]
    total_ms: npt.NDArray[np.float64]
    error: npt.NDArray[np.bool_]
    stages: Mapping[str, StageColumn] = field(default_factory=dict)
    series: Mapping[str, StageColumn] = field(default_factory=dict)
    """LLM series (ttft, tpot, itl) in the stage block's layout."""

    def __len__(self) -> int:
        return int(self.ts.shape[0])


@dataclass(frozen=True, slots=True)
class Corruption:
    """Damaged bytes in the middle of the log, skipped to the next intact record."""

    offset: int
    length: int
    batches_lost: int
    """Batches whose records were in the damaged bytes (from the sequence-number gap)."""
    after_seq: int | None
    """The last intact batch before the damage (None: the damage starts the log)."""

    def describe(self, path: Path) -> str:
        """One line for the log and the status."""
        where = "at the start" if self.after_seq is None else f"after batch {self.after_seq}"
        return (
            f"{path.name}: {self.length} corrupt bytes at offset {self.offset} ({where}); "
            f"{self.batches_lost} acknowledged batch(es) lost, the intact records after it kept"
        )


@dataclass(frozen=True, slots=True)
class LogContents:
    """What `ObservationLog.read` found: the intact batches and what it had to skip."""

    batches: list[Batch]
    corruption: list[Corruption]
    intact_end: int
    """Offset just past the last intact record."""
    torn_bytes: int
    """Bytes after the last intact record (a write that was never acknowledged)."""


class Unwritable(ValueError):
    """A batch the record layout cannot hold (a name past 65,535 bytes, a column past
    2**32 rows): refused before it is queued, so it never fails the group it would join."""


def check_writable(batch: Batch) -> None:
    """Raise Unwritable unless `_encode` can write `batch` (the layout's field widths)."""
    n = len(batch)
    if n > _MAX_BATCH:
        raise Unwritable(f"a batch of {n:,} observations; at most {_MAX_BATCH:,}")
    for block in (batch.stages, batch.series):
        for name, col in block.items():
            size = len(name.encode("utf-8", "surrogatepass"))
            if not 0 < size <= 0xFFFF:
                raise Unwritable(
                    f"a stage name of {size:,} bytes ({name[:40]!r}...); the log holds 1 to 65,535"
                )
            if len(col) > 0xFFFFFFFF or col.index.shape != col.ms.shape:
                raise Unwritable(f"stage {name[:40]!r}: {len(col):,} values, not one per index")
            if len(col) and (int(col.index.min()) < 0 or int(col.index.max()) >= max(n, 1)):
                raise Unwritable(f"stage {name[:40]!r}: a row index outside the batch of {n}")


def _encode_stages(stages: Mapping[str, StageColumn]) -> bytes:
    parts = []
    for name, col in stages.items():
        raw = name.encode("utf-8")
        parts.append(_STAGE_HEAD.pack(len(raw), len(col)) + raw)
        parts.append(np.ascontiguousarray(col.index, dtype="<u4").tobytes())
        parts.append(np.ascontiguousarray(col.ms, dtype="<f8").tobytes())
    return b"".join(parts)


def _encode_columns(columns: Mapping[str, StageColumn], n: int) -> bytes:
    """A TBW5 block: a column over every row in order is stored without its indexes."""
    parts = []
    every: npt.NDArray[np.int64] | None = None
    for name, col in columns.items():
        raw = name.encode("utf-8")
        dense = len(col) == n and n > 0
        if dense and not col.dense:
            if every is None:
                every = np.arange(n, dtype=np.int64)
            dense = bool(np.array_equal(col.index, every))
        parts.append(_COLUMN_HEAD.pack(len(raw), len(col), _DENSE if dense else 0) + raw)
        if not dense:
            parts.append(np.ascontiguousarray(col.index, dtype="<u4").tobytes())
        parts.append(np.ascontiguousarray(col.ms, dtype="<f8").tobytes())
    return b"".join(parts)


def _encode(batch: Batch) -> bytes:
    """The TBW3 record of `batch` (TBW5 when it carries LLM series)."""
    columns = (
        np.ascontiguousarray(batch.ts, dtype="<f8").tobytes()
        + np.ascontiguousarray(batch.total_ms, dtype="<f8").tobytes()
        + np.ascontiguousarray(batch.error, dtype=np.uint8).tobytes()
    )
    magic = _MAGIC_V3
    if batch.series:
        magic = _MAGIC_V5
        n = len(batch)
        stages = _encode_columns(batch.stages, n)
        series = _encode_columns(batch.series, n)
        payload = b"".join((columns, _STAGE_LEN.pack(len(stages)), stages, series))
    else:
        payload = columns + _encode_stages(batch.stages)
    head = _HEADER_V3.pack(magic, batch.seq, len(batch), len(payload), zlib.crc32(payload))
    return head + _HEADER_CRC.pack(zlib.crc32(head)) + payload


def _decode_stages(
    block: bytes, n: int, *, repeats: bool = False, flags: bool = False
) -> dict[str, StageColumn] | None:
    """The stage block's columns, or None when it does not parse (a corrupt record).

    `flags`: TBW5 column heads (a flags byte; a dense column stores no indexes)."""
    out: dict[str, StageColumn] = {}
    head = _COLUMN_HEAD if flags else _STAGE_HEAD
    pos = 0
    every: npt.NDArray[np.int64] | None = None
    while pos < len(block):
        if pos + head.size > len(block):
            return None
        size, m, *flag = head.unpack_from(block, pos)
        dense = bool(flag) and flag[0] == _DENSE
        if flag and flag[0] not in (0, _DENSE):
            return None
        pos += head.size
        end = pos + size + (8 if dense else 12) * m
        if end > len(block) or (m > n and not repeats) or (dense and m != n):
            return None
        try:
            name = block[pos : pos + size].decode("utf-8")
        except UnicodeDecodeError:
            return None
        pos += size
        if dense:
            if every is None:
                every = np.arange(n, dtype=np.int64)
            index = every
            ms = np.frombuffer(block, dtype="<f8", count=m, offset=pos).astype(np.float64)
        else:
            index = np.frombuffer(block, dtype="<u4", count=m, offset=pos).astype(np.int64)
            ms = np.frombuffer(block, dtype="<f8", count=m, offset=pos + 4 * m).astype(np.float64)
            if m and int(index.max()) >= n:
                return None
        out[name] = StageColumn(index, ms, dense=dense)
        pos = end
    return out


def _frame(data: bytes, pos: int) -> tuple[int, int, int, int, int] | None:
    """(seq, count, payload start, payload end, crc) of the record at `pos`, if it frames."""
    if pos + _HEADER.size > len(data):
        return None
    magic = data[pos : pos + 4]
    if magic == _MAGIC_V3 or magic in _BLOCKED:
        if pos + _V3_SIZE > len(data):
            return None
        _, seq, n, size, crc = _HEADER_V3.unpack_from(data, pos)
        (head_crc,) = _HEADER_CRC.unpack_from(data, pos + _HEADER_V3.size)
        if zlib.crc32(data[pos : pos + _HEADER_V3.size]) != head_crc or size < 17 * n:
            return None
        start = pos + _V3_SIZE
        return seq, n, start, start + size, crc
    if magic not in (_MAGIC, _MAGIC_STAGES):
        return None
    _, seq, n, crc = _HEADER.unpack_from(data, pos)
    start, block = pos + _HEADER.size, 0
    if magic == _MAGIC_STAGES:
        if start + _STAGE_LEN.size > len(data):
            return None
        (block,) = _STAGE_LEN.unpack_from(data, start)
        start += _STAGE_LEN.size
    return seq, n, start, start + 17 * n + block, crc


def _decode(data: bytes, pos: int) -> tuple[Batch, int] | None:
    """The batch whose record starts at `pos` and the offset after it; None if damaged."""
    framed = _frame(data, pos)
    if framed is None:
        return None
    seq, n, start, end, crc = framed
    if n > _MAX_BATCH or end - start > _MAX_PAYLOAD or end > len(data):
        return None
    payload = data[start:end]
    if zlib.crc32(payload) != crc:
        return None
    ts = np.frombuffer(payload, dtype="<f8", count=n, offset=0).astype(np.float64)
    total = np.frombuffer(payload, dtype="<f8", count=n, offset=8 * n).astype(np.float64)
    err = np.frombuffer(payload, dtype=np.uint8, count=n, offset=16 * n).astype(bool)
    rest, series = payload[17 * n :], None
    magic = data[pos : pos + 4]
    flags = magic == _MAGIC_V5
    if magic in _BLOCKED:
        if len(rest) < _STAGE_LEN.size:
            return None
        (block,) = _STAGE_LEN.unpack_from(rest, 0)
        if _STAGE_LEN.size + block > len(rest):
            return None
        tail = rest[_STAGE_LEN.size + block :]
        series = _decode_stages(tail, n, repeats=True, flags=flags)
        if series is None:
            return None
        rest = rest[_STAGE_LEN.size : _STAGE_LEN.size + block]
    stages = _decode_stages(rest, n, flags=flags) if rest else {}
    if stages is None:
        return None
    return Batch(seq, ts, total, err, stages, series or {}), end


def _resync(data: bytes, pos: int) -> tuple[Batch, int, int] | None:
    """The next intact record after `pos`: (batch, its offset, the offset after it)."""
    at = pos + 1
    while True:
        hits = [h for h in (data.find(m, at) for m in _MAGICS) if h >= 0]
        if not hits:
            return None
        at = min(hits)
        found = _decode(data, at)
        if found is not None:
            return found[0], at, found[1]
        at += 1


def _read(data: bytes) -> LogContents:
    batches: list[Batch] = []
    corruption: list[Corruption] = []
    pos = 0
    while pos < len(data):
        found = _decode(data, pos)
        if found is not None:
            batches.append(found[0])
            pos = found[1]
            continue
        later = _resync(data, pos)
        if later is None:
            break  # the rest is a torn tail
        batch, at, end = later
        last = batches[-1].seq if batches else None
        lost = max(1, batch.seq - last - 1) if last is not None else 1
        corruption.append(Corruption(pos, at - pos, lost, last))
        batches.append(batch)
        pos = end
    return LogContents(batches, corruption, pos, len(data) - pos)


class ObservationLog:
    """Write-ahead log of observation batches; `append_many` is one write and one fsync."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self.appended = 0
        """Batches made durable since the log was opened."""
        self.fsyncs = 0
        """fdatasync calls that made them durable (fewer than `appended` under group commit)."""

    def append(
        self,
        seq: int,
        ts: npt.NDArray[np.float64],
        total_ms: npt.NDArray[np.float64],
        error: npt.NDArray[np.bool_],
    ) -> None:
        """Append one batch durably; when this returns, the batch survives a crash."""
        self.append_many([Batch(seq, ts, total_ms, error)])

    def append_many(self, batches: Sequence[Batch]) -> None:
        """Append batches with one write and one fdatasync; all are durable when it returns."""
        data = b"".join(_encode(b) for b in batches)
        with self._lock:
            end = os.fstat(self._fd).st_size
            try:
                written = os.write(self._fd, data)
                if written != len(data):
                    raise OSError(28, f"short write ({written} of {len(data)} bytes)")
                self.fsyncs += 1
                os.fdatasync(self._fd)
            except OSError:
                # Cut a partial record off, or replay would stop there and lose the
                # batches acknowledged after it. After a failed fsync the written
                # bytes are in doubt, so they go too: none of them is acknowledged.
                os.ftruncate(self._fd, end)
                raise
            self.appended += len(batches)

    def read(self) -> LogContents:
        """Every intact batch in order, the damage skipped and the torn tail measured."""
        with open(self.path, "rb") as fh:
            data = fh.read()
        return _read(data)

    def batches(self) -> Iterator[Batch]:
        """Every intact batch in order (damaged records and a torn tail skipped)."""
        yield from self.read().batches

    def cut(self, end: int) -> None:
        """Cut the log back to `end` bytes (a torn tail), durably, before anything is appended."""
        with self._lock:
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)

    def size(self) -> int:
        """Bytes in the log."""
        return os.fstat(self._fd).st_size

    def truncate(self) -> None:
        """Empty the log (after a snapshot holds everything in it)."""
        with self._lock:
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
