"""A measured profile of a log: per-request stage times in NumPy, for budgeting.

Re-budgeting reads whole requests so that every figure keeps the correlation between
stages the log shows (a slow retrieval and a slow rerank in the same request stay
together). Logs up to `MAX_ROWS` requests are read whole and every figure is exact; a
larger log is read as a uniform sample of that many requests, and the profile says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tailbudget import _arrow_numpy as arrow_numpy
from tailbudget._units import PERCENTILES, quantile_of
from tailbudget.audit.covariates import output_tokens_column
from tailbudget.logs.engine import arrow_result
from tailbudget.logs.table import LogTable

if TYPE_CHECKING:
    import ibis.expr.types as ir
    from ibis.backends import BaseBackend

FloatArray = npt.NDArray[np.float64]

MAX_ROWS = 2_000_000
"""Requests read into memory; a larger log is sampled uniformly (seeded)."""

_LLM_COLUMNS = ("ttft_ms", "decode_ms", "output_tokens", "input_tokens", "tpot_ms")
ITL = "itl_ms"
"""The list column of a request's inter-token gaps (the LLM readers write it)."""


@dataclass(frozen=True)
class Profile:
    """Per-request times of a log's stages (ms), whole requests kept together."""

    source: str
    stages: tuple[str, ...]
    times: dict[str, FloatArray]
    """Stage name -> per-request ms (non-error requests, aligned by index)."""
    total: FloatArray
    rows: int
    """Requests in the log (before sampling), errors included."""
    errors: int
    sampled: bool
    covariates: dict[str, FloatArray] = field(default_factory=dict)
    """Token counts the LLM block needs (output_tokens, input_tokens), when the log has them."""
    gaps: FloatArray | None = None
    """Every inter-token gap of the profiled requests, pooled (ms), when the log has them."""
    longest_gap: FloatArray | None = None
    """Each profiled request's largest inter-token gap (NaN without gaps), aligned by index."""
    failed: int = 0
    """Requests that failed without a latency (not in `rows`; never good)."""

    @property
    def used(self) -> int:
        """Requests the figures come from."""
        return int(self.total.size)

    def quantile(self, stage: str, percentile: str) -> float:
        """A stage's measured percentile (`total` for end to end)."""
        values = self.total if stage == "total" else self.times[stage]
        return float(np.quantile(values, quantile_of(percentile)))

    def percentiles(self, stage: str, names: tuple[str, ...] = PERCENTILES) -> dict[str, float]:
        """A stage's measured percentiles by name."""
        return {p: self.quantile(stage, p) for p in names}

    def residual(self) -> FloatArray:
        """Per-request unattributed time (total minus the stages' sum), >= 0."""
        if not self.stages:
            return self.total.copy()
        summed = np.sum([self.times[s] for s in self.stages], axis=0)
        out: FloatArray = np.clip(self.total - summed, 0.0, None)
        return out

    def how(self) -> str:
        """How the figures were computed, for the report's provenance."""
        if self.sampled:
            return (
                f"a uniform sample of {self.used:,} of {self.rows:,} requests (figures within "
                "sampling error of the whole log)"
            )
        return f"all {self.used:,} non-error requests of {self.rows:,} (exact)"


def profile_of(log: LogTable, *, seed: int = 0) -> Profile:
    """Read a canonical log's stage columns into a Profile (errors left out, counted)."""
    table = log.table
    # Through Arrow, never pandas: the audit calls this for a breached e2e objective and
    # loads no pandas (half a second to import).
    rows = _count(table, log.backend)
    errors = _count(table.filter(table.error), log.backend) if rows else 0
    ok = table.filter(~table.error)
    sampled = rows - errors > MAX_ROWS
    if sampled:
        ok = ok.sample((MAX_ROWS * 1.02) / max(rows - errors, 1), seed=seed)
    wanted = ["total_ms", *(log.stage_column(s) for s in log.stages)]
    tokens = output_tokens_column(table.columns)
    if tokens is not None and tokens != "output_tokens" and "output_tokens" not in table.columns:
        ok = ok.mutate(output_tokens=ok[tokens])  # the audit's answer-length column
    extra = [c for c in _LLM_COLUMNS if c in ok.columns and c not in wanted]
    lists = [ITL] if ITL in table.columns else []
    arrow = arrow_result(ok.select(*wanted, *extra, *lists), log.backend)
    if sampled and arrow.num_rows > MAX_ROWS:
        arrow = arrow.slice(0, MAX_ROWS)
    columns = {name: _floats(arrow.column(name)) for name in (*wanted, *extra)}
    keep = np.isfinite(columns["total_ms"])
    for s in log.stages:
        keep &= np.isfinite(columns[log.stage_column(s)])
    times = {s: columns[log.stage_column(s)][keep] for s in log.stages}
    covs = {
        c: columns[c][keep] for c in extra if c not in {log.stage_column(s) for s in log.stages}
    }
    gaps = _gaps(arrow.column(ITL), keep) if lists else None
    longest = _longest(arrow.column(ITL), keep) if lists else None
    return Profile(
        source=log.source,
        stages=tuple(log.stages),
        times=times,
        total=columns["total_ms"][keep],
        rows=rows,
        errors=errors,
        sampled=sampled,
        covariates=covs,
        gaps=gaps,
        longest_gap=longest,
        failed=int(getattr(log.rows, "failed", 0)),
    )


def _count(table: ir.Table, backend: BaseBackend) -> int:
    return int(arrow_result(table.aggregate(n=table.count()), backend).column("n")[0].as_py())


def _longest(column: pa.Array | pa.ChunkedArray, keep: npt.NDArray[np.bool_]) -> FloatArray:

    chunked = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])
    lists = chunked.combine_chunks().filter(pa.array(keep))
    # The row each gap belongs to, then the largest gap per row (NaN for rows without).
    parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.float64)
    out: FloatArray = np.full(len(lists), np.nan)
    ok = np.isfinite(flat)
    if ok.any():
        order = np.lexsort((flat[ok], parents[ok]))
        rows, vals = parents[ok][order], flat[ok][order]
        last = np.r_[rows[1:] != rows[:-1], True]
        out[rows[last]] = vals[last]
    return out


def _gaps(column: pa.Array | pa.ChunkedArray, keep: npt.NDArray[np.bool_]) -> FloatArray:

    chunked = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])
    lists = chunked.combine_chunks().filter(pa.array(keep))
    flat = pc.list_flatten(lists)
    out: FloatArray = flat.to_numpy(zero_copy_only=False).astype(np.float64)
    return out[np.isfinite(out)]


def _floats(column: pa.Array | pa.ChunkedArray) -> FloatArray:
    # From the buffers (NaN where null), not to_numpy, which loads pandas for a chunked
    # column; a copy, since the profile's arrays are written to (masks, clips).
    if str(column.type) in arrow_numpy.NUMPY_TYPES or str(column.type) == "null":
        return np.array(arrow_numpy.floats(column), dtype=np.float64)
    out: FloatArray = column.to_numpy(zero_copy_only=False).astype(np.float64)
    return out
