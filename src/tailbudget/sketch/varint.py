"""Unsigned LEB128 varints for arrays of non-negative counts, and zigzag for offsets."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_MAX_BYTES = 10


def zigzag(n: int) -> int:
    """Map a signed int to an unsigned one (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...)."""
    return (n << 1) if n >= 0 else ((-n) << 1) - 1


def unzigzag(z: int) -> int:
    """Inverse of `zigzag`."""
    return (z >> 1) if not z & 1 else -((z + 1) >> 1)


def encode_uvarints(values: npt.NDArray[np.int64]) -> bytes:
    """LEB128-encode non-negative int64s, vectorised over the array."""
    v = np.asarray(values, dtype=np.uint64)
    if v.size == 0:
        return b""
    # number of 7-bit groups each value needs (at least one)
    nbytes = np.ones(v.size, dtype=np.int64)
    rest = v >> np.uint64(7)
    while np.any(rest):
        nbytes += rest > 0
        rest >>= np.uint64(7)
    out = np.zeros(int(nbytes.sum()), dtype=np.uint8)
    starts = np.concatenate(([0], np.cumsum(nbytes)[:-1]))
    for k in range(int(nbytes.max())):
        has = nbytes > k
        group = ((v[has] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        more = (nbytes[has] > k + 1).astype(np.uint8) << 7
        out[starts[has] + k] = group | more
    return out.tobytes()


def decode_uvarints(data: bytes) -> npt.NDArray[np.int64]:
    """Decode what `encode_uvarints` wrote; ValueError on a truncated or oversize varint."""
    b = np.frombuffer(data, dtype=np.uint8)
    if b.size == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero((b & 0x80) == 0)
    if ends.size == 0 or ends[-1] != b.size - 1:
        raise ValueError("truncated varint")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if int(lengths.max()) > 9:  # 9 x 7 = 63 bits keeps int64 counts non-negative
        raise ValueError("varint too long")
    out = np.zeros(ends.size, dtype=np.uint64)
    for k in range(int(lengths.max())):
        has = lengths > k
        out[has] |= (b[starts[has] + k] & np.uint64(0x7F)).astype(np.uint64) << np.uint64(7 * k)
    return out.astype(np.int64)
