"""`add_rows`: several sketches fed at once end exactly as if fed one by one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tailbudget.sketch import LatencySketch
from tailbudget.sketch.rows import add_rows

RNG = np.random.default_rng(7)

ROWS = {
    "lognormal": lambda n: RNG.lognormal(6.0, 0.8, n),
    "pareto": lambda n: (RNG.pareto(1.5, n) + 1) * 40.0,
    "uniform": lambda n: RNG.uniform(0.5, 3000.0, n),
    "constant": lambda n: np.full(n, 120.0),
    "tiny": lambda n: RNG.uniform(1e-5, 1e-3, n),
}


def one_by_one(rows: np.ndarray, accuracy: float = 0.01) -> list[LatencySketch]:
    out = []
    for row in rows:
        s = LatencySketch(accuracy)
        s.add_many(row)
        out.append(s)
    return out


def fused(rows: np.ndarray, accuracy: float = 0.01, rounds: int = 1) -> list[LatencySketch]:
    sketches = [LatencySketch(accuracy) for _ in rows]
    for _ in range(rounds):
        add_rows(sketches, rows)
    return sketches


@pytest.mark.parametrize("accuracy", [0.01, 0.002, 0.05])
def test_named_distributions_bin_exactly_as_add_many(accuracy: float) -> None:
    rows = np.stack([make(2000) for make in ROWS.values()])
    assert fused(rows, accuracy) == one_by_one(rows, accuracy)


def test_batches_after_the_first_grow_each_store_as_add_many_does() -> None:
    first, second = RNG.lognormal(5, 0.3, (3, 500)), RNG.lognormal(8, 1.0, (3, 500))
    sketches = fused(first)
    add_rows(sketches, second)
    alone = one_by_one(first)
    for s, row in zip(alone, second, strict=True):
        s.add_many(row)
    assert sketches == alone
    for s in sketches:
        assert s.count == 1000


def test_rows_with_nan_zero_or_out_of_range_values_fall_back_row_by_row() -> None:
    rows = RNG.lognormal(6, 0.5, (4, 300))
    rows[0, 5] = np.nan
    rows[1, 7] = 0.0  # a one-token answer's tpot: clamped into the lowest bucket
    rows[2, 9] = 5e9  # over max_value: clamped and counted
    assert fused(rows) == one_by_one(rows)
    assert fused(rows)[2].clamped == 1


def test_sketches_of_other_settings_are_fed_alone() -> None:
    rows = RNG.lognormal(6, 0.5, (2, 100))
    mixed = [LatencySketch(0.01), LatencySketch(0.02)]
    add_rows(mixed, rows)
    want = [LatencySketch(0.01), LatencySketch(0.02)]
    for s, row in zip(want, rows, strict=True):
        s.add_many(row)
    assert mixed == want


def test_a_matrix_that_is_not_one_row_per_sketch_is_refused() -> None:
    with pytest.raises(ValueError, match="one row per sketch"):
        add_rows([LatencySketch()], np.ones((2, 3)))


@settings(max_examples=100, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 4), st.integers(1, 50)),
        elements=st.floats(min_value=0, max_value=1e10, allow_nan=False),
    )
)
def test_any_matrix_bins_as_add_many(rows: np.ndarray) -> None:
    assert fused(rows) == one_by_one(rows)
