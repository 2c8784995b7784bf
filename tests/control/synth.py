"""Generated request logs for replay tests: Poisson arrivals, lognormal latency whose
p95 follows a given curve, Bernoulli errors. Figures come from these draws only."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from tailbudget.control.logsource import ReplayLog

START = datetime(2026, 11, 1, 8, 0, tzinfo=UTC).timestamp()
SIGMA = 0.4
Z95 = 1.6448536269514722


def synth(
    duration_s: float,
    rps: float,
    p95_ms: Callable[[np.ndarray], np.ndarray],
    error_p: Callable[[np.ndarray], np.ndarray] | float = 0.0,
    *,
    seed: int = 0,
    gaps: tuple[tuple[float, float], ...] = (),
) -> ReplayLog:
    """A log of `duration_s` seconds; offsets in `gaps` carry no requests."""
    rng = np.random.default_rng(seed)
    n = rng.poisson(rps * duration_s)
    t = np.sort(rng.uniform(0.0, duration_s, n))
    for a, b in gaps:
        t = t[(t < a) | (t >= b)]
    median = p95_ms(t) / np.exp(Z95 * SIGMA)
    ms = median * rng.lognormal(0.0, SIGMA, t.size)
    p = error_p(t) if callable(error_p) else np.full(t.size, error_p)
    err = rng.random(t.size) < p
    return ReplayLog(
        ts_s=START + t,
        total_ms=ms,
        error=err,
        source="synth",
        format="generated",
        rows_total=t.size,
    )


def _times(ts_s: np.ndarray, unit: str) -> pa.Array:
    scale = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    return pa.array(np.rint(ts_s * scale).astype(np.int64), pa.timestamp(unit, tz="UTC"))


def to_parquet(log: ReplayLog, path: Path, unit: str = "us") -> Path:
    """Write the log as Parquet: ts (UTC timestamp in `unit`), total_ms and error."""
    pq.write_table(
        pa.table({"ts": _times(log.ts_s, unit), "total_ms": log.total_ms, "error": log.error}),
        path,
    )
    return path


def write_csv(path: Path, columns: dict[str, np.ndarray], *, time_col: str | None = None) -> Path:
    """Write columns as CSV; `time_col` (epoch seconds) is written as ISO timestamps."""
    data = {k: _times(v, "us") if k == time_col else pa.array(v) for k, v in columns.items()}
    pacsv.write_csv(pa.table(data), path)
    return path


def const(v: float) -> Callable[[np.ndarray], np.ndarray]:
    """A constant curve."""
    return lambda t: np.full(t.shape, v, dtype=float)


def crossing(curve: Callable[[np.ndarray], np.ndarray], level: float, end: float) -> float:
    """First offset (s) at which `curve` exceeds `level` (1 s resolution)."""
    grid = np.arange(0.0, end, 1.0)
    above = np.flatnonzero(curve(grid) > level)
    assert above.size, f"curve never exceeds {level}"
    return float(grid[above[0]])
