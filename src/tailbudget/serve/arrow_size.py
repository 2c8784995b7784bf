"""What an Arrow IPC stream decodes to, read from its messages before any is decoded.

pyarrow decompresses a record batch whole when it reads it, so a few KiB of
zstd (a list column of ten million zeros) becomes hundreds of MiB before any
check could run. Each IPC message states its row count, its arrays' lengths
(`FieldNode`) and its buffers; a compressed buffer starts with its decoded
length (int64, -1 when stored as is). This module reads those few fields from
the message's flatbuffer header (the Arrow format's `Message.fbs`) and the
first eight bytes of each buffer, so a body is refused on what it declares.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["IpcSize", "ipc_size"]

_RECORD_BATCH, _DICTIONARY_BATCH = 3, 4


@dataclass(frozen=True)
class IpcSize:
    """What a stream's batches declare: rows, array elements and decoded buffer bytes."""

    rows: int
    elements: int
    """Every array's length summed (a list column's values count here)."""
    decoded_bytes: int


class _Table:
    """One flatbuffer table: its fields by index (absent fields read as None)."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        size = struct.unpack_from("<H", buf, vtable)[0]
        self.offsets = struct.unpack_from(f"<{(size - 4) // 2}H", buf, vtable + 4)

    def _at(self, field: int) -> int | None:
        off = self.offsets[field] if field < len(self.offsets) else 0
        return self.pos + off if off else None

    def scalar(self, field: int, fmt: str, default: int = 0) -> int:
        at = self._at(field)
        return default if at is None else int(struct.unpack_from(fmt, self.buf, at)[0])

    def table(self, field: int) -> _Table | None:
        at = self._at(field)
        return (
            None if at is None else _Table(self.buf, at + struct.unpack_from("<I", self.buf, at)[0])
        )

    def structs(self, field: int) -> list[tuple[int, int]]:
        """A vector of two-int64 structs (FieldNode, Buffer)."""
        at = self._at(field)
        if at is None:
            return []
        vec = at + struct.unpack_from("<I", self.buf, at)[0]
        n = struct.unpack_from("<I", self.buf, vec)[0]
        return [struct.unpack_from("<qq", self.buf, vec + 4 + 16 * i) for i in range(n)]


def _batch(header: _Table, body: bytes) -> tuple[int, int, int]:
    """(rows, elements, decoded bytes) of one RecordBatch header over its body."""
    rows = header.scalar(0, "<q")
    elements = sum(max(0, length) for length, _ in header.structs(1))
    compressed = header.table(3) is not None
    decoded = 0
    for offset, length in header.structs(2):
        if not compressed or length < 8:
            decoded += max(0, length)
            continue
        if not 0 <= offset <= len(body) - 8:
            raise ValueError("a buffer lies outside the message body")
        declared = struct.unpack_from("<q", body, offset)[0]
        decoded += length - 8 if declared == -1 else max(0, declared)
    return rows, elements, decoded


def ipc_size(data: bytes) -> IpcSize:
    """What the stream in `data` declares; ValueError when a message cannot be read."""
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(data))
    rows = elements = decoded = 0
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        meta = message.metadata.to_pybytes()
        root = _Table(meta, struct.unpack_from("<I", meta, 0)[0])
        kind = root.scalar(1, "<B")
        header = root.table(2)
        if header is None or kind not in (_RECORD_BATCH, _DICTIONARY_BATCH):
            continue
        if kind == _DICTIONARY_BATCH:
            header = header.table(1)  # DictionaryBatch.data: a RecordBatch
            if header is None:
                continue
        body = message.body.to_pybytes() if message.body is not None else b""
        r, e, d = _batch(header, body)
        rows, elements, decoded = rows + r, elements + e, decoded + d
    return IpcSize(rows, elements, decoded)
