"""The write-ahead log of observation batches: binary records, CRC-checked, fsynced.

Two record kinds, told apart by their magic:

- `TBW1`: header (magic, seq, count, crc32) then the columns ts (f8), total_ms
  (f8) and error (u1). Batches without per-stage times are still written this
  way, byte for byte as before stages were logged.
- `TBW2`: the same plus the byte length of a stage block after the columns;
  for each stage: name length (u2), count (u4), the UTF-8 name, the rows it
  belongs to (u4 indexes into the batch) and its milliseconds (f8).
- `TBW3`: the same plus the byte length of a series block (ttft, tpot, itl,
  in the stage block's layout; a row may appear more than once, one inter-token
  gap each) after the stage block. Batches without series stay TBW1 or TBW2.

`append_many` writes several records with one write and makes them durable
with one fdatasync (the group commit in `tailbudget.control.groupcommit`).
A record that fails CRC, magic or bounds checks ends the replay: it is the
torn tail of a write that was never acknowledged.
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

__all__ = ["Batch", "ObservationLog", "StageColumn"]

_MAGIC = b"TBW1"
_MAGIC_STAGES = b"TBW2"
_MAGIC_SERIES = b"TBW3"
_HEADER = struct.Struct("<4sQII")  # magic, seq, count, crc32 of the payload
_STAGE_LEN = struct.Struct("<I")  # TBW2 only, right after the header: stage block bytes
_STAGE_HEAD = struct.Struct("<HI")  # name bytes, observations
_MAX_BATCH = 10_000_000


@dataclass(frozen=True, slots=True)
class StageColumn:
    """One stage's times in a batch: which rows of the batch have it, and its ms."""

    index: npt.NDArray[np.int64]
    ms: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.ms.shape[0])


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


def _encode_stages(stages: Mapping[str, StageColumn]) -> bytes:
    parts = []
    for name, col in stages.items():
        raw = name.encode("utf-8")
        parts.append(_STAGE_HEAD.pack(len(raw), len(col)) + raw)
        parts.append(np.ascontiguousarray(col.index, dtype="<u4").tobytes())
        parts.append(np.ascontiguousarray(col.ms, dtype="<f8").tobytes())
    return b"".join(parts)


def _encode(batch: Batch) -> bytes:
    """The record of `batch` (TBW1 without stages, TBW2 with)."""
    payload = (
        np.ascontiguousarray(batch.ts, dtype="<f8").tobytes()
        + np.ascontiguousarray(batch.total_ms, dtype="<f8").tobytes()
        + np.ascontiguousarray(batch.error, dtype=np.uint8).tobytes()
    )
    n = len(batch)
    if not batch.stages and not batch.series:
        return _HEADER.pack(_MAGIC, batch.seq, n, zlib.crc32(payload)) + payload
    block = _encode_stages(batch.stages)
    payload += block
    if not batch.series:
        header = _HEADER.pack(_MAGIC_STAGES, batch.seq, n, zlib.crc32(payload))
        return header + _STAGE_LEN.pack(len(block)) + payload
    series = _encode_stages(batch.series)
    payload += series
    header = _HEADER.pack(_MAGIC_SERIES, batch.seq, n, zlib.crc32(payload))
    return header + _STAGE_LEN.pack(len(block)) + _STAGE_LEN.pack(len(series)) + payload


def _decode_stages(block: bytes, n: int, *, repeats: bool = False) -> dict[str, StageColumn] | None:
    """The stage block's columns, or None when it does not parse (a corrupt record)."""
    out: dict[str, StageColumn] = {}
    pos = 0
    while pos < len(block):
        if pos + _STAGE_HEAD.size > len(block):
            return None
        size, m = _STAGE_HEAD.unpack_from(block, pos)
        pos += _STAGE_HEAD.size
        end = pos + size + 12 * m
        if end > len(block) or (m > n and not repeats):
            return None
        try:
            name = block[pos : pos + size].decode("utf-8")
        except UnicodeDecodeError:
            return None
        pos += size
        index = np.frombuffer(block, dtype="<u4", count=m, offset=pos).astype(np.int64)
        ms = np.frombuffer(block, dtype="<f8", count=m, offset=pos + 4 * m).astype(np.float64)
        if m and int(index.max()) >= n:
            return None
        out[name] = StageColumn(index, ms)
        pos = end
    return out


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

    def batches(self) -> Iterator[Batch]:
        """Every intact batch in order; stops at a torn or corrupt tail (never acknowledged)."""
        with open(self.path, "rb") as fh:
            data = fh.read()
        pos = 0
        while pos + _HEADER.size <= len(data):
            magic, seq, n, crc = _HEADER.unpack_from(data, pos)
            start = pos + _HEADER.size
            block = series_block = 0
            if magic in (_MAGIC_STAGES, _MAGIC_SERIES):
                lengths = 1 if magic == _MAGIC_STAGES else 2
                if start + lengths * _STAGE_LEN.size > len(data):
                    return
                (block,) = _STAGE_LEN.unpack_from(data, start)
                start += _STAGE_LEN.size
                if lengths == 2:
                    (series_block,) = _STAGE_LEN.unpack_from(data, start)
                    start += _STAGE_LEN.size
            elif magic != _MAGIC:
                return
            end = start + 17 * n + block + series_block
            if n > _MAX_BATCH or end > len(data):
                return
            payload = data[start:end]
            if zlib.crc32(payload) != crc:
                return
            ts = np.frombuffer(payload, dtype="<f8", count=n, offset=0).astype(np.float64)
            total = np.frombuffer(payload, dtype="<f8", count=n, offset=8 * n).astype(np.float64)
            err = np.frombuffer(payload, dtype=np.uint8, count=n, offset=16 * n).astype(bool)
            cut = 17 * n + block
            stages = _decode_stages(payload[17 * n : cut], n) if block else {}
            series = _decode_stages(payload[cut:], n, repeats=True) if series_block else {}
            if stages is None or series is None:
                return
            yield Batch(seq, ts, total, err, stages, series)
            pos = end

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
