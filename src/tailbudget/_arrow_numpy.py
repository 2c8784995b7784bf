"""Arrow columns as NumPy arrays, read from the Arrow buffers.

pyarrow's own `to_numpy` (and `np.asarray` of an Arrow array) imports pandas, which
neither the audit nor the server otherwise loads: half a second of start-up and tens of
MiB. Fixed-width numbers and booleans are all these callers read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["NUMPY_TYPES", "bits", "bools", "floats", "ints", "primitive", "valid_mask"]

NUMPY_TYPES = {
    "int8": "i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "halffloat": "<f2",
    "float": "<f4",
    "double": "<f8",
}
"""The Arrow types read in place, with their NumPy dtypes."""


def primitive(arr: pa.Array) -> npt.NDArray[Any]:
    """The values of a fixed-width numeric array, in place (read-only)."""
    dtype = np.dtype(NUMPY_TYPES[str(arr.type)])
    whole = np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))
    return whole[arr.offset :]


def bits(buffer: pa.Buffer, offset: int, n: int) -> npt.NDArray[np.bool_]:
    """n bits of an Arrow bitmap (validity or boolean values) from bit `offset`."""
    raw = np.frombuffer(buffer, dtype=np.uint8, count=(offset + n + 7) // 8)
    return np.unpackbits(raw, count=offset + n, bitorder="little")[offset:].astype(bool)


def valid_mask(arr: pa.Array) -> npt.NDArray[np.bool_] | None:
    """Which slots hold a value (None: every one)."""
    if arr.null_count == 0:
        return None
    return bits(arr.buffers()[0], arr.offset, len(arr))


def floats(column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.float64]:
    """A numeric column as float64, NaN where null (read-only when it is the column's
    own buffer)."""
    parts = [_float_chunk(a) for a in _chunks(column)]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0)


def ints(column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.int64]:
    """An integer column without nulls as int64."""
    parts = [primitive(a).astype(np.int64, copy=False) for a in _chunks(column)]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def bools(column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    """A boolean column as bools, False where null."""
    parts = []
    for a in _chunks(column):
        values = bits(a.buffers()[1], a.offset, len(a))
        valid = valid_mask(a)
        parts.append(values if valid is None else values & valid)
    return np.concatenate(parts) if parts else np.empty(0, dtype=bool)


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    if not hasattr(column, "chunks"):
        return [column]
    # An engine's result can come in thousands of small chunks: one copy into a single
    # buffer costs less than a NumPy call per chunk.
    return [column.combine_chunks()] if column.num_chunks > 1 else list(column.chunks)


def _float_chunk(arr: pa.Array) -> npt.NDArray[np.float64]:
    if str(arr.type) == "null":
        return np.full(len(arr), np.nan)
    values = primitive(arr).astype(np.float64, copy=False)
    valid = valid_mask(arr)
    if valid is not None:
        values = np.where(valid, values, np.nan)
    return values
