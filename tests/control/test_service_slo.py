"""`/v1/status` says what the SLO says: the gated objectives judged on the window by the
one verdict rule (breach / healthy / unknown), the rules' verdict and actions beside it,
and each stage's budget slice and burn (issue 36, item 3)."""

from __future__ import annotations

import numpy as np

from tailbudget.budget.objectives import parse_objectives
from tailbudget.control.columns import StageColumn
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.batch import Batch
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tests.control.runtimes import policy

T0 = 1_800_000_000.0


def _runtime(tmp_path, slo: str = "p95=600") -> Runtime:
    config = RuntimeConfig(
        state_dir=tmp_path / "state",
        actions=ActionsConfig(log=False),
        objectives=parse_objectives(slo),
        slices=(("retrieval", "p95", 200.0),),
    )
    return Runtime(policy(), config)


def _ingest(rt: Runtime, values: list[float], t: float, retrieval_ms: float = 100.0) -> None:
    ms = np.asarray(values, dtype=np.float64)
    stage = StageColumn.every_row(np.full(ms.shape[0], retrieval_ms))
    rt.ingest(
        Batch(np.full(ms.shape[0], t), ms, np.zeros(ms.shape[0], dtype=bool), {"retrieval": stage})
    )


def test_a_p95_over_the_slo_is_a_breach_whatever_the_rules_say(tmp_path):
    # The report's case: p95 699 ms against a 600 ms SLO read "healthy" (the verdict was
    # the rollback rules' alone). 15 of 100 over 600 ms proves more than 5% over.
    rt = _runtime(tmp_path)
    _ingest(rt, [500.0] * 85 + [699.0] * 15, T0, retrieval_ms=250.0)
    status = rt.status(T0 + 1)
    assert status["verdict"] == "breach" and status["rollout_verdict"] == "healthy"
    (row,) = status["slo"]
    assert row["objective"] == "e2e.p95" and (row["n"], row["over"]) == (100, 15)
    assert row["verdict"] == "breach" and row["confidence"] > 0.99
    # Each stage's slice and burn, as /metrics' tailbudget_stage_budget_burn.
    stage = status["stages"]["retrieval"]
    assert stage["budget"] == {"p95": 200.0}
    assert abs(stage["burn"]["p95"] - 1.25) < 0.02  # 250 ms (sketch: 1%) over 200
    rt.close()


def test_too_few_requests_are_unknown_then_healthy(tmp_path):
    rt = _runtime(tmp_path)
    _ingest(rt, [100.0] * 10, T0)  # p95 needs 20 for a pass
    status = rt.status(T0 + 1)
    assert status["verdict"] == "unknown" and status["slo"][0]["verdict"] == "inconclusive"
    assert "10 more" in status["slo"][0]["reason"]
    _ingest(rt, [100.0] * 20, T0 + 1)
    assert rt.status(T0 + 2)["verdict"] == "healthy"
    # 2 of 3 over: proved at p95 however few (P = 0.007).
    rt.close()
    few = _runtime(tmp_path / "few")
    _ingest(few, [100.0, 900.0, 900.0], T0)
    assert few.status(T0 + 1)["verdict"] == "breach"
    few.close()


def test_without_objectives_the_rules_verdict_stands(tmp_path):
    config = RuntimeConfig(state_dir=tmp_path / "state", actions=ActionsConfig(log=False))
    rt = Runtime(policy(), config)
    assert rt.status(T0)["verdict"] == "unknown" and rt.status(T0)["slo"] == []
    _ingest(rt, [100.0] * 20, T0)
    assert rt.status(T0 + 0.5)["verdict"] == "healthy"
    rt.close()
