"""Replay is open loop: it points to the closed-loop simulation."""

from __future__ import annotations

import numpy as np

from tailbudget.budget.policy import parse_policy
from tailbudget.control.logsource import ReplayLog
from tailbudget.control.replay import SIMULATE_POINTER
from tests.control.replay_json import replay_json


def test_replay_points_to_simulate() -> None:
    ts = 1.7e9 + np.arange(600, dtype=float)
    log = ReplayLog(
        ts_s=ts,
        total_ms=np.full(ts.size, 100.0),
        error=np.zeros(ts.size, dtype=bool),
        source="mem",
        format="table",
        rows_total=ts.size,
    )
    rep = replay_json(log, parse_policy("default"))
    assert SIMULATE_POINTER in rep["notes"]
    assert "tailbudget simulate" in SIMULATE_POINTER
