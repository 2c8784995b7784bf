"""A rollback the replay decides inside a scale-up's cold window is a cold start: the
replay says so (issue 26: the demo rolled back six times exactly at the cold starts)."""

from __future__ import annotations

from datetime import UTC, datetime

from tailbudget.control.cold_windows import mark_cold_rollbacks
from tailbudget.control.replay_record import ReplayDecision


def _decision(action: str, offset: float) -> ReplayDecision:
    return ReplayDecision(
        t=f"PT{offset:.3f}S",
        t_offset_s=offset,
        action=action,
        metric="p99_vs_baseline",
        value=2.0,
        threshold=1.5,
        reason="p99 / baseline 2x",
    )


def test_only_rollbacks_after_a_scale_up_are_marked():
    t0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC).timestamp()
    events = [
        (datetime(2026, 3, 2, 8, 16, tzinfo=UTC), "scale_up"),
        (datetime(2026, 3, 2, 9, 0, tzinfo=UTC), "deploy"),  # a release: its regression is real
    ]
    decisions = [
        _decision("rollback", 18 * 60 + 20),  # 2m20s after the scale-up
        _decision("scale_up", 18 * 60),
        _decision("rollback", 62 * 60),  # after the deploy
        _decision("rollback", 30 * 60),  # past the 5-minute window
    ]
    note = mark_cold_rollbacks(decisions, t0, events, 300.0)
    assert [d.cold_window for d in decisions] == ["2026-03-02T08:16:00Z", None, None, None]
    assert "cold start" in decisions[0].reason
    assert note is not None and note.startswith("1 of 3 rollbacks")
    assert mark_cold_rollbacks(decisions, t0, [], 300.0) is None
