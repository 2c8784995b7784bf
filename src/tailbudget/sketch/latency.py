"""`LatencySketch`: DDSketch-style log-spaced buckets in one dense numpy store.

A value x > 0 lands in bucket i = floor(log(x) / log(gamma)) with
gamma = (1 + a) / (1 - a); reporting 2 * gamma**(i+1) / (gamma + 1) for every
value of bucket i is within relative error `a` of each of them. Values are clamped
into [min_value, max_value] so the store (and the serialized form) stays
bounded: at a = 1% the whole clamp range is under 1,800 buckets.

Not thread-safe: a caller sharing one sketch across threads holds a lock.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from tailbudget.errors import TailbudgetError
from tailbudget.sketch.varint import decode_uvarints, encode_uvarints, unzigzag, zigzag

_MAGIC = b"TBS1"
_HEADER = struct.Struct("<4sddddddqqq")
"""magic, accuracy, min_value, max_value, min, max, sum, count, clamped, offset"""

FloatArray = npt.NDArray[np.float64]
_CHUNK = 1 << 16


class LatencySketch:
    """Quantiles of a stream with relative error <= `relative_accuracy`, mergeable."""

    __slots__ = (
        "_clamped",
        "_count",
        "_counts",
        "_gamma",
        "_inv_log_gamma",
        "_max",
        "_min",
        "_offset",
        "_sum",
        "max_value",
        "min_value",
        "relative_accuracy",
    )

    def __init__(
        self,
        relative_accuracy: float = 0.01,
        *,
        min_value: float = 1e-6,
        max_value: float = 1e9,
    ) -> None:
        if not isinstance(relative_accuracy, int | float) or not 0.0 < relative_accuracy < 1.0:
            raise TailbudgetError(
                f"relative_accuracy must be in (0, 1), e.g. 0.01, got {relative_accuracy!r}"
            )
        if not 0.0 < min_value < max_value or not math.isfinite(max_value):
            raise TailbudgetError(
                f"need 0 < min_value < max_value (finite), got {min_value!r} and {max_value!r}"
            )
        self.relative_accuracy = float(relative_accuracy)
        self.min_value = float(min_value)
        self.max_value = float(max_value)
        self._gamma = (1.0 + self.relative_accuracy) / (1.0 - self.relative_accuracy)
        self._inv_log_gamma = 1.0 / math.log(self._gamma)
        self._counts: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._offset = 0
        self._count = 0
        self._clamped = 0
        self._sum = 0.0
        self._min = math.inf
        self._max = -math.inf

    # ---- ingest -----------------------------------------------------------------

    @property
    def count(self) -> int:
        """Number of values added (clamped ones included; NaN never counted)."""
        return self._count

    @property
    def clamped(self) -> int:
        """How many values lay outside [min_value, max_value] (or were NaN-free infinities)."""
        return self._clamped

    @property
    def sum(self) -> float:
        """Sum of the (clamped) values added."""
        return self._sum

    @property
    def min(self) -> float | None:
        """Smallest (clamped) value added, or None when empty."""
        return self._min if self._count else None

    @property
    def max(self) -> float | None:
        """Largest (clamped) value added, or None when empty."""
        return self._max if self._count else None

    def add(self, value: float) -> bool:
        """Add one value; False (and nothing added) when it is NaN or not a number."""
        try:
            x = float(value)
        except (TypeError, ValueError):
            return False
        if x != x:
            return False
        if x < self.min_value or x > self.max_value:
            self._clamped += 1
            x = self.min_value if x < self.min_value else self.max_value
        i = self._index(x)
        self._ensure(i, i)
        self._counts[i - self._offset] += 1
        self._count += 1
        self._sum += x
        self._min = min(self._min, x)
        self._max = max(self._max, x)
        return True

    def add_many(self, values: npt.ArrayLike) -> int:
        """Add an array of values in one vectorised pass; returns how many were added.

        NaNs are skipped (the return value tells how many were not); values outside
        [min_value, max_value] are clamped and counted in `clamped`.
        """
        x = np.asarray(values, dtype=np.float64).ravel()
        if x.size == 0:
            return 0
        lo, hi = float(np.min(x)), float(np.max(x))
        if lo != lo or hi != hi:  # a NaN poisons min/max
            x = x[~np.isnan(x)]
            if x.size == 0:
                return 0
            lo, hi = float(np.min(x)), float(np.max(x))
        if lo < self.min_value or hi > self.max_value:
            self._clamped += int(np.count_nonzero((x < self.min_value) | (x > self.max_value)))
            x = np.clip(x, self.min_value, self.max_value)
            lo = min(max(lo, self.min_value), self.max_value)
            hi = min(max(hi, self.min_value), self.max_value)
        total = float(np.sum(x))
        lo_i = self._index(lo)
        hi_i = self._index(hi)
        self._ensure(lo_i - 1, hi_i + 1)
        self._bin_into(x)
        self._count += int(x.size)
        self._sum += total
        self._min = min(self._min, lo)
        self._max = max(self._max, hi)
        return int(x.size)

    def _bin_into(self, x: FloatArray) -> None:
        # float32 log is SIMD-fast; its rounding moves a value by at most one bucket
        # right at a boundary, which keeps the error within accuracy * (1 + 1e-5).
        # Chunks reuse cache-sized buffers instead of touching fresh pages per pass.
        n = min(x.size, _CHUNK)
        f = np.empty(n, dtype=np.float32)
        idx = np.empty(n, dtype=np.intp)
        scale = np.float32(self._inv_log_gamma)
        shift = np.float32(self._offset)
        size = self._counts.size
        if x.size <= _CHUNK:  # one chunk (every serve batch): counted straight in
            self._counts += _bucket_counts(x, f, idx, scale, shift, size)
            return
        acc = np.zeros(size, dtype=np.int64)
        for start in range(0, x.size, _CHUNK):
            part = x[start : start + _CHUNK]
            m = part.size
            acc += _bucket_counts(part, f[:m], idx[:m], scale, shift, size)
        self._counts += acc

    def _index(self, x: float) -> int:
        # bucket i holds [gamma**i, gamma**(i+1))
        return math.floor(math.log(x) * self._inv_log_gamma)

    def _ensure(self, lo: int, hi: int) -> None:
        size = self._counts.size
        if size == 0:
            self._offset = lo
            self._counts = np.zeros(hi - lo + 1, dtype=np.int64)
            return
        new_lo = min(lo, self._offset)
        new_hi = max(hi, self._offset + size - 1)
        if new_lo == self._offset and new_hi == self._offset + size - 1:
            return
        grown = np.zeros(new_hi - new_lo + 1, dtype=np.int64)
        start = self._offset - new_lo
        grown[start : start + size] = self._counts
        self._counts = grown
        self._offset = new_lo

    # ---- queries ----------------------------------------------------------------

    def quantiles(self, qs: Iterable[float]) -> list[float | None]:
        """Several quantiles at once (each q in [0, 1]); None for each when empty."""
        q = [float(v) for v in qs]
        if not all(0.0 <= v <= 1.0 for v in q):
            raise TailbudgetError(f"quantiles must be in [0, 1], got {q}")
        if self._count == 0:
            return [None] * len(q)
        cum = np.cumsum(self._counts)
        # rank of the lower order statistic, as np.quantile(method="lower")
        ranks = [math.floor(v * (self._count - 1)) for v in q]
        pos = np.searchsorted(cum, ranks, side="right").tolist()
        g, lo, hi = self._gamma, self._min, self._max
        out: list[float | None] = []
        for v, i in zip(q, pos, strict=True):
            if v <= 0.0:
                out.append(lo)
            elif v >= 1.0:
                out.append(hi)
            else:
                # the point within `accuracy` of both ends of [gamma**i, gamma**(i+1))
                x = 2.0 * g ** (i + self._offset + 1) / (g + 1.0)
                out.append(min(max(x, lo), hi))
        return out

    def quantile(self, q: float) -> float | None:
        """The q-quantile (q in [0, 1]) within relative accuracy, or None when empty."""
        return self.quantiles([q])[0]

    def rank_fraction(self, value: float) -> float:
        """Share of values <= `value` (bucket resolution); 0.0 when empty."""
        if self._count == 0:
            return 0.0
        x = min(max(float(value), self.min_value), self.max_value)
        i = self._index(x) - self._offset
        if i < 0:
            return 0.0
        return float(np.sum(self._counts[: i + 1])) / self._count

    # ---- combine and persist -----------------------------------------------------

    def _compatible(self, other: LatencySketch) -> None:
        if (
            other.relative_accuracy != self.relative_accuracy
            or other.min_value != self.min_value
            or other.max_value != self.max_value
        ):
            raise TailbudgetError(
                "cannot merge sketches with different settings: "
                f"accuracy {self.relative_accuracy} vs {other.relative_accuracy}, "
                f"range [{self.min_value}, {self.max_value}] vs "
                f"[{other.min_value}, {other.max_value}]; build both with the same arguments"
            )

    def merge(self, other: LatencySketch) -> None:
        """Add every value of `other` into this sketch (same accuracy and range)."""
        self._compatible(other)
        if other._count == 0:
            return
        self._ensure(other._offset, other._offset + other._counts.size - 1)
        start = other._offset - self._offset
        self._counts[start : start + other._counts.size] += other._counts
        self._count += other._count
        self._clamped += other._clamped
        self._sum += other._sum
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)

    @classmethod
    def merged(cls, sketches: Sequence[LatencySketch]) -> LatencySketch:
        """One new sketch holding every value of `sketches` (all with the same settings)."""
        if not sketches:
            return cls()
        first = sketches[0]
        out = cls(first.relative_accuracy, min_value=first.min_value, max_value=first.max_value)
        for s in sketches:
            out._compatible(s)
        full = [s for s in sketches if s._count]
        if not full:
            return out
        lo = min(s._offset for s in full)
        hi = max(s._offset + s._counts.size for s in full)
        counts = np.zeros(hi - lo, dtype=np.int64)
        for s in full:
            start = s._offset - lo
            counts[start : start + s._counts.size] += s._counts
        out._counts, out._offset = counts, lo
        out._count = sum(s._count for s in full)
        out._clamped = sum(s._clamped for s in full)
        out._sum = math.fsum(s._sum for s in full)
        out._min = min(s._min for s in full)
        out._max = max(s._max for s in full)
        return out

    def copy(self) -> LatencySketch:
        """An independent copy."""
        out = LatencySketch(
            self.relative_accuracy, min_value=self.min_value, max_value=self.max_value
        )
        out.merge(self)
        return out

    def clear(self) -> None:
        """Forget every value (keeps the settings)."""
        self._counts = np.zeros(0, dtype=np.int64)
        self._offset = 0
        self._count = self._clamped = 0
        self._sum = 0.0
        self._min, self._max = math.inf, -math.inf

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencySketch):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"LatencySketch(relative_accuracy={self.relative_accuracy}, count={self._count}, "
            f"buckets={np.count_nonzero(self._counts)})"
        )

    def to_bytes(self) -> bytes:
        """Compact form: a fixed header, then zlib'd varint counts of the used span."""
        nz = np.flatnonzero(self._counts)
        if nz.size:
            first, last = int(nz[0]), int(nz[-1])
            counts = self._counts[first : last + 1]
            offset = self._offset + first
        else:
            counts, offset = self._counts[:0], 0
        header = _HEADER.pack(
            _MAGIC,
            self.relative_accuracy,
            self.min_value,
            self.max_value,
            self._min if self._count else 0.0,
            self._max if self._count else 0.0,
            self._sum,
            self._count,
            self._clamped,
            zigzag(offset),
        )
        return header + zlib.compress(encode_uvarints(counts), 6)

    @classmethod
    def from_bytes(cls, data: bytes) -> LatencySketch:
        """Rebuild a sketch from `to_bytes()`; TailbudgetError when the bytes are not one."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TailbudgetError(f"a serialized sketch is bytes, got {type(data).__name__}")
        raw = bytes(data)
        if len(raw) < _HEADER.size or raw[:4] != _MAGIC:
            raise TailbudgetError(
                "not a serialized LatencySketch (bad header); pass what to_bytes() returned"
            )
        magic, acc, lo_v, hi_v, mn, mx, total, count, clamped, zz = _HEADER.unpack_from(raw)
        del magic
        try:
            counts = decode_uvarints(zlib.decompress(raw[_HEADER.size :]))
        except (zlib.error, ValueError) as exc:
            raise TailbudgetError(f"corrupt LatencySketch payload ({exc})") from None
        sketch = cls(acc, min_value=lo_v, max_value=hi_v)
        if count < 0 or clamped < 0 or int(counts.sum()) != count:
            raise TailbudgetError(
                f"corrupt LatencySketch: header count {count} != bucket total {int(counts.sum())}"
            )
        if counts.size:
            offset = unzigzag(zz)
            lo_i, hi_i = sketch._index(lo_v) - 2, sketch._index(hi_v) + 2
            if offset < lo_i or offset + counts.size - 1 > hi_i or not lo_v <= mn <= mx <= hi_v:
                raise TailbudgetError(
                    "corrupt LatencySketch: buckets or min/max outside the sketch's value range"
                )
            sketch._counts = counts
            sketch._offset = offset
            sketch._min, sketch._max = mn, mx
        sketch._count, sketch._clamped, sketch._sum = count, clamped, total
        return sketch


def _bucket_counts(
    part: FloatArray,
    f: npt.NDArray[np.float32],
    idx: npt.NDArray[np.intp],
    scale: np.float32,
    shift: np.float32,
    size: int,
) -> npt.NDArray[np.int64]:
    """Counts per bucket (offset-relative) of `part`, in the buffers `f` and `idx`."""
    np.copyto(f, part, casting="same_kind")
    np.log(f, out=f)
    f *= scale
    f -= shift  # shifted to >= 0, truncation is floor
    np.copyto(idx, f, casting="unsafe")
    return np.bincount(idx, minlength=size)[:size]
