"""A generated log whose load doubles for 20 minutes (the closed-loop scenario)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

BASE_RATE = 40.0
EPISODE = (30 * 60.0, 50 * 60.0)
SPAN_S = 80 * 60.0


def doubling_log(path: Path, seed: int = 3) -> Path:
    """Poisson arrivals at 40/s, 80/s from minute 30 to 50; lognormal work, median 100 ms."""
    rng = np.random.default_rng(seed)
    t, out = 0.0, []
    while t < SPAN_S:
        rate = 2 * BASE_RATE if EPISODE[0] <= t < EPISODE[1] else BASE_RATE
        t += rng.exponential(1.0 / rate)
        out.append(t)
    ts = np.asarray(out[:-1])
    work = rng.lognormal(np.log(100.0), 0.5, size=ts.size)
    pre = rng.uniform(0.2, 0.4, size=ts.size)
    table = pa.table(
        {
            "ts": pa.array(np.round((1.7e9 + ts) * 1e6).astype(np.int64)).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "total_ms": work,
            "prep_ms": work * pre,
            "model_ms": work * (1 - pre),
        }
    )
    pq.write_table(table, path)
    return path
