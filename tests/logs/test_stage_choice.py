"""The live traces' stage choice on Arrow is the audit's choice on the engine: the same
slowest traces by rank, the same order by time then label, the same folds."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from tailbudget.logs.engine import connect
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.span_stages import choose_stages
from tailbudget.logs.stage_choice import choose_on_arrow


def _paths(rng: random.Random) -> pa.Table:
    """Traces with ties in root duration and in stage time (the orders' tie-breaks)."""
    names = [f"s{i}" for i in range(rng.randint(1, 90))]
    rows = []
    for t in range(rng.randint(1, 120)):
        trace = f"{rng.randint(0, 50):04x}" if rng.random() < 0.3 else f"{t:04x}"
        dur = float(rng.choice([10, 20, 20, rng.random() * 100]))
        rows.append((trace, True, dur, rng.choice(names), rng.choice([0.0, 1.5, dur])))
        for _ in range(rng.randint(0, 8)):
            own = rng.choice([0.0, 0.1, 0.2, rng.random() * 10, 1e-3 * rng.randint(0, 5)])
            rows.append((trace, False, rng.random() * 50, rng.choice(names), own))
    trace, root, dur_ms, stage, self_ms = zip(*rows, strict=True)
    return pa.table(
        {
            "trace": pa.array(trace),
            "is_root": pa.array(root),
            "dur_ms": pa.array(dur_ms, pa.float64()),
            "stage_raw": pa.array(stage, pa.string()),
            "self_ms": pa.array(self_ms, pa.float64()),
        }
    )


@pytest.mark.parametrize("seed", range(40))
def test_the_arrow_choice_is_the_engines(seed: int) -> None:
    rng = random.Random(seed)
    paths = _paths(rng)
    options = ReadOptions(max_stages=rng.choice([1, 3, 8]))
    backend = connect(None)
    backend.con.register("paths", paths)
    assert choose_on_arrow(paths, options) == choose_stages(
        backend.table("paths"), backend, options
    )
