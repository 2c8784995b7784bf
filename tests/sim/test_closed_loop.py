"""Closed loop: the load doubles for 20 minutes; the budget's policy against fixed sizes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tailbudget.budget.model import SLO
from tailbudget.budget.objectives import parse_objectives
from tailbudget.budget.policy import parse_policy
from tailbudget.logs import ReadOptions
from tailbudget.sim.arrivals import ArrivalSpec
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.policies import parse_policy_spec
from tailbudget.sim.run import RunResult, simulate
from tests.sim.synth import EPISODE, doubling_log

SLO_P95 = 1000.0
OBJ = parse_objectives(f"p95={SLO_P95:g}")


def _run(log: Path, policies: list[str], **model: float) -> list[RunResult]:
    fitted = fit_logs(
        [str(log)],
        ReadOptions(),
        ModelOptions(concurrency=4, **model),  # type: ignore[arg-type]
    )
    rep = simulate(
        fitted.model,
        OBJ,
        arrivals=ArrivalSpec("log"),
        policies=[parse_policy_spec(p) for p in policies],
        budget_policy=parse_policy("default", SLO(p95=SLO_P95)),
        replicas=2,
        seed=1,
        log_times=fitted.log_times,
    )
    return rep.runs


def _episode_ok(r: RunResult) -> float:
    """Share of evaluations within the episode whose last-minute p95 met the SLO."""
    pts = [p for p in r.timeline if EPISODE[0] <= p.t_offset_s < EPISODE[1] + 60]
    return sum(1 for p in pts if p.value_ms is not None and p.value_ms <= SLO_P95) / len(pts)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return doubling_log(tmp_path_factory.mktemp("sim") / "doubling.parquet")


def test_budget_policy_holds_the_slo_cheaper_than_peak(log: Path) -> None:
    budget, pre = _run(log, ["budget", "fixed:2"])
    peak = budget.peak_replicas
    assert peak > 2
    (at_peak,) = _run(log, [f"fixed:{peak}"])
    # most of the episode, not all: the default's latency-based scale-down cannot see that
    # fewer replicas would not hold, so it steps down and back up (the report shows it)
    assert _episode_ok(budget) >= 0.6
    assert budget.replica_hours < at_peak.replica_hours
    assert pre.objectives[0].minutes_in_breach >= 10
    assert _episode_ok(pre) < 0.3
    assert any(d.action == "scale_up" for d in budget.decisions)
    assert any(d.action == "scale_down" for d in budget.decisions)


def test_scale_up_takes_effect_after_the_provisioning_delay(log: Path) -> None:
    (run,) = _run(log, ["budget"], provision_delay_s=90.0)
    first = next(d for d in run.decisions if d.action == "scale_up")
    ready_more = next(p for p in run.timeline if p.ready > 2)
    assert ready_more.t_offset_s >= first.t_s + 90.0
    assert ready_more.t_offset_s <= first.t_s + 90.0 + 10.0


def test_cold_starts_delay_the_recovery(log: Path) -> None:
    def recovered(run: RunResult) -> float:
        first = next(d for d in run.decisions if d.action == "scale_up")
        return next(
            p.t_offset_s
            for p in run.timeline
            if p.t_offset_s > first.t_s and p.value_ms is not None and p.value_ms <= SLO_P95
        )

    (warm,) = _run(log, ["budget"], cold_factor=1.0, cold_window_s=300.0)
    (cold,) = _run(log, ["budget"], cold_factor=2.5, cold_window_s=300.0)
    assert cold.cold_starts > 0
    assert recovered(cold) > recovered(warm)
    assert cold.replica_hours >= warm.replica_hours


def test_same_seed_same_result(log: Path) -> None:
    a = _run(log, ["budget"])[0]
    b = _run(log, ["budget"])[0]
    assert a.to_dict() == b.to_dict()
    assert np.isfinite(a.replica_hours)
