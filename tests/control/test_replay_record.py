"""The typed replay record holds every key of the replay contract, and gives it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tailbudget.budget.policy import parse_policy
from tailbudget.control.logsource import load_replay_log
from tailbudget.control.replay import Baseline, replay
from tailbudget.control.replay_record import ReplayReport
from tests.control.test_replay_llm import AIPERF, _llm_log


def _same_contract(record: ReplayReport) -> ReplayReport:
    # JSON both ways: what is written reads back as the same record, key for key.
    doc = json.loads(record.to_json())
    assert ReplayReport.of(doc) == record
    assert json.loads(record.model_dump_json()) == doc
    return record


def test_an_llm_replay_round_trips_with_its_series(tmp_path: Path) -> None:
    log = load_replay_log(_llm_log(tmp_path / "llm.parquet"))
    policy = parse_policy("default", targets={"ttft.p95": 1200.0})
    record = _same_contract(replay(log, policy, baseline=Baseline(3000.0, "given")))
    assert record.decisions and record.open_loop and record.loop == "open"
    point = record.timeline[-1].model_dump()
    assert {"ttft_p95", "ttft_p99"} <= set(point)


def test_a_real_aiperf_replay_round_trips() -> None:
    if not AIPERF.exists():
        pytest.skip("../shared/data/aiperf_profile_export.jsonl is missing")
    log = load_replay_log(AIPERF)
    record = _same_contract(replay(log, parse_policy("default", targets={"ttft.p95": 1200.0})))
    assert record.rows.used == 89 and record.name() == "aiperf_profile_export.jsonl"
    assert record.peak_p99_ms is not None


def test_a_key_the_record_does_not_know_is_refused(tmp_path: Path) -> None:
    log = load_replay_log(_llm_log(tmp_path / "llm.parquet"))
    rep = json.loads(replay(log, parse_policy("default")).to_json())
    with pytest.raises(ValidationError, match="new_figure"):
        ReplayReport.of({**rep, "new_figure": 1.0})
