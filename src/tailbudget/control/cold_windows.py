"""Rollbacks that fall in a scale-up's cold window: said, not hidden, and left to the audit.

For a few minutes after a scale-up, requests that land on the new replica run
cold (weights loading, empty caches): the p99 jumps, and a rule comparing p99
with a baseline fires. Rolling back a release would not warm the replica, so a
replay marks each rollback decided inside such a window as a cold start, which
the audit's cold-start check attributes, rather than as a regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailbudget.control.replay_record import ReplayDecision

__all__ = ["COLD_EVENTS", "mark_cold_rollbacks"]

COLD_EVENTS = ("scale_up", "scaleup", "scale-up", "autoscale")
"""Events after which replicas start cold (a deploy is not one: its regression is real)."""


def mark_cold_rollbacks(
    decisions: list[ReplayDecision],
    t0_s: float,
    events: Sequence[tuple[datetime, str]],
    window_s: float,
) -> str | None:
    """Tag each rollback inside a cold window (`cold_window`, and its reason), replacing it
    in `decisions` by its marked copy; a note or None.

    `t0_s` is the log's first timestamp (epoch s): a decision's time is t0 + t_offset_s.
    """
    starts = sorted(
        (t.astimezone(UTC).timestamp(), t)
        for t, name in events
        if name.strip().lower() in COLD_EVENTS
    )
    if not starts or window_s <= 0:
        return None
    marked = 0
    rollbacks = 0
    for i, d in enumerate(decisions):
        if d.action != "rollback":
            continue
        rollbacks += 1
        at = t0_s + d.t_offset_s
        hit = next((t for s, t in reversed(starts) if s <= at < s + window_s), None)
        if hit is None:
            continue
        marked += 1
        when = hit.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        reason = (
            f"{d.reason}; in the cold window after the scale_up at {when}: a cold start "
            "(see the audit's cold start section), which a rollback would not undo"
        )
        decisions[i] = d.model_copy(update={"cold_window": when, "reason": reason})
    if not marked:
        return None
    return (
        f"{marked} of {rollbacks} rollbacks fell in the {window_s / 60:g}-minute cold window "
        "after a scale-up: cold starts, left to the audit's cold-start check, not regressions"
    )
