"""LLM-series windows: columns over every row, fed together, end as if fed one by one."""

from __future__ import annotations

import numpy as np

from tailbudget.control.series_windows import SeriesWindows
from tailbudget.serve.wal import StageColumn

T0 = 1_800_000_000.0
RNG = np.random.default_rng(3)


def feed(ts: np.ndarray, series: dict[str, np.ndarray], *, dense: bool) -> SeriesWindows:
    windows = SeriesWindows(60.0, 6)
    total = np.full(ts.shape[0], 5000.0)
    error = np.zeros(ts.shape[0], dtype=bool)
    n = ts.shape[0]
    cols = {
        name: StageColumn(np.arange(n, dtype=np.int64), ms, dense=dense)
        for name, ms in series.items()
    }
    windows.observe(ts, total, error, cols, {}, windows.groups(ts))
    return windows


def test_dense_series_fed_at_once_match_the_column_by_column_path() -> None:
    n = 1500
    series = {
        "ttft": RNG.lognormal(5.5, 0.6, n),
        "tpot": np.where(RNG.random(n) < 0.05, 0.0, RNG.lognormal(3.0, 0.3, n)),
        "itl_p99": RNG.lognormal(3.5, 0.4, n),
    }
    for ts in (
        np.full(n, T0),  # one slot
        T0 + np.sort(RNG.uniform(0, 35, n)),  # spread over several slots
    ):
        fast, slow = feed(ts, series, dense=True), feed(ts, series, dense=False)
        assert fast.windows_state() == slow.windows_state()
        assert fast.itl_summaries == slow.itl_summaries == n
        stats = fast.stats(T0 + 40, min_samples=5, confidence=0.95)
        assert stats["ttft"].count == stats["tpot"].count == stats["itl"].count == n


def test_late_rows_are_counted_per_window_as_before() -> None:
    windows = SeriesWindows(60.0, 6)
    n = 10
    now = np.full(n, T0 + 600)
    cols = {"ttft": StageColumn.every_row(np.full(n, 100.0))}
    windows.observe(now, np.full(n, 900.0), np.zeros(n, bool), cols, {}, windows.groups(now))
    old = np.full(n, T0)  # ten minutes behind the ring's newest slot
    two = {
        "ttft": StageColumn.every_row(np.full(n, 50.0)),
        "tpot": StageColumn.every_row(np.full(n, 9.0)),
    }
    windows.observe(old, np.full(n, 900.0), np.zeros(n, bool), two, {}, windows.groups(old))
    assert windows._window("ttft").late == n
    # a window first made by a late batch starts its ring there, as observe_many does
    assert windows.stats(T0 + 30, min_samples=1, confidence=0.95)["tpot"].count == n
