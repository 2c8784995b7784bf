"""Per-stage rolling windows: the end-to-end window's ring, per stage name."""

from __future__ import annotations

import numpy as np

from tailbudget.control.stage_windows import StageWindows, stage_summary
from tailbudget.control.windows import RollingWindow
from tailbudget.serve.wal import StageColumn

T0 = 1_800_000_000.0


def _col(rows: list[int] | np.ndarray, ms: np.ndarray) -> StageColumn:
    return StageColumn(np.asarray(rows, dtype=np.int64), np.asarray(ms, dtype=np.float64))


def test_each_stage_matches_a_window_fed_its_own_times():
    rng = np.random.default_rng(3)
    n = 2000
    ts = T0 + rng.uniform(0, 30, n)
    embed = rng.lognormal(3, 0.3, n)
    llm_rows = np.flatnonzero(rng.random(n) < 0.6)  # not every request reaches the llm
    llm = rng.lognormal(6.5, 0.8, llm_rows.size)
    windows = StageWindows(60.0, 6)
    half = n // 2
    # two batches, the second's rows numbered from 0 again
    windows.observe(ts[:half], {"embed": _col(np.arange(half), embed[:half])})
    first = llm_rows[llm_rows < half]
    second = llm_rows[llm_rows >= half]
    windows.observe(ts[:half], {"llm": _col(first, llm[: first.size])})
    windows.observe(
        ts[half:],
        {
            "embed": _col(np.arange(n - half), embed[half:]),
            "llm": _col(second - half, llm[first.size :]),
        },
    )
    got = windows.stats(T0 + 31, min_samples=1500, confidence=0.975)
    assert list(got) == ["embed", "llm"]
    for name, times, when in (("embed", embed, ts), ("llm", llm, ts[llm_rows])):
        direct = RollingWindow(60.0, 6)
        direct.observe_many(when, times)
        want = direct.stats(T0 + 31, min_samples=1500)
        assert (got[name].count, got[name].p50, got[name].p95, got[name].p99) == (
            want.count,
            want.p50,
            want.p95,
            want.p99,
        )
    assert got["embed"].known and not got["llm"].known  # 1200-odd llm times < min_samples
    summary = stage_summary(got["llm"])
    assert summary["count"] == llm.size and set(summary) == {
        "count",
        "p50",
        "p95",
        "p99",
        "known",
        "window_s",
    }
    # the llm p99 is near the lognormal's (sketch accuracy 1%, sampling noise aside)
    assert 0.8 < summary["p99"] / float(np.quantile(llm, 0.99)) < 1.2


def test_a_stage_whose_times_left_the_ring_is_dropped_on_observation_time():
    windows = StageWindows(10.0, 5)
    windows.observe(np.array([T0]), {"old": _col([0], np.array([5.0]))})
    late = {"new": _col([0], np.array([7.0]))}
    # what observing would leave: T0 + 8 keeps "old" in the ring, T0 + 10.5 does not
    assert windows.tracked_after(np.array([T0 + 8]), late) == 2
    assert windows.tracked_after(np.array([T0 + 10.5]), late) == 1
    windows.observe(np.array([T0 + 8]), late)
    assert "old" in windows and len(windows) == 2  # T0 is still inside the newest ring
    windows.observe(np.array([T0 + 10.5]), {"new": _col([0], np.array([7.0]))})
    assert "old" not in windows and "new" in windows and len(windows) == 1
    # a batch without stage times changes nothing
    windows.observe(np.array([T0 + 100]), {})
    assert list(windows.stats(T0 + 11, min_samples=1, confidence=0.975)) == ["new"]


def test_state_round_trips_and_a_changed_window_starts_afresh():
    windows = StageWindows(60.0, 6)
    ts = T0 + np.arange(50, dtype=np.float64)
    windows.observe(ts, {"db": _col(np.arange(50), np.linspace(1, 50, 50))})
    state = windows.to_state()
    again = StageWindows(60.0, 6)
    again.load_state(state)
    assert again.to_state() == state
    assert again.stats(T0 + 50, min_samples=1, confidence=0.975) == windows.stats(
        T0 + 50, min_samples=1, confidence=0.975
    )
    other = StageWindows(30.0, 3)  # the policy's window changed: nothing carried over
    other.load_state(state)
    assert len(other) == 0
