"""Several sketches fed at once: row k of a matrix into sketch k, in one vectorised pass.

`serve` adds each batch to one sketch per series (ttft, tpot, itl, ...), every
series as long as the batch. Adding them one by one pays NumPy's per-call cost
a dozen times per sketch for arrays of a few thousand values; here the bucket
arithmetic runs once over the whole matrix and one `bincount` counts every
row, each into its own stretch of the result. The arithmetic is that of
`LatencySketch.add_many` operation for operation (float32 log, scale, the
sketch's own offset, truncation), so each sketch ends with exactly the counts
it would have had.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailbudget.sketch.latency import LatencySketch

__all__ = ["add_rows"]


def add_rows(sketches: Sequence[LatencySketch], rows: npt.NDArray[np.float64]) -> None:
    """Add `rows[k]` to `sketches[k]` for every k (a 2-D array, one row per sketch).

    A row with a NaN or a value to clamp, or for a sketch of another accuracy or
    range than the first, takes `add_many` (the same result, without the shortcut)."""
    if rows.ndim != 2 or rows.shape[0] != len(sketches):
        raise ValueError(f"need one row per sketch, got {rows.shape} for {len(sketches)}")
    if not sketches or rows.shape[1] == 0:
        return
    first = sketches[0]
    lo, hi = rows.min(axis=1), rows.max(axis=1)
    fits = (lo >= first.min_value) & (hi <= first.max_value)  # a NaN fails both
    for k, sketch in enumerate(sketches):
        if (sketch.relative_accuracy, sketch.min_value, sketch.max_value) != (
            first.relative_accuracy,
            first.min_value,
            first.max_value,
        ):
            fits[k] = False
    if not fits.all():
        for alone in np.flatnonzero(~fits).tolist():
            sketches[alone].add_many(rows[alone])
        keep = np.flatnonzero(fits).tolist()
        if keep:
            add_rows([sketches[k] for k in keep], rows[keep])
        return
    sums = rows.sum(axis=1)
    for k, sketch in enumerate(sketches):
        sketch._ensure(sketch._index(float(lo[k])) - 1, sketch._index(float(hi[k])) + 1)
    sizes = np.array([s._counts.size for s in sketches], dtype=np.intp)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    f = rows.astype(np.float32)
    np.log(f, out=f)
    f *= np.float32(first._inv_log_gamma)
    f -= np.array([s._offset for s in sketches], dtype=np.float32)[:, None]
    idx = f.astype(np.intp)  # shifted to >= 0, truncation is floor
    idx += starts[:, None]
    counts = np.bincount(idx.ravel(), minlength=int(sizes.sum()))
    n = int(rows.shape[1])
    for k, sketch in enumerate(sketches):
        sketch._counts += counts[starts[k] : starts[k] + sizes[k]]
        sketch._count += n
        sketch._sum += float(sums[k])
        sketch._min = min(sketch._min, float(lo[k]))
        sketch._max = max(sketch._max, float(hi[k]))
