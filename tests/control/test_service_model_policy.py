"""serve with the model policy: desired replicas from the fitted model, ahead of the breach."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tailbudget.budget.objectives import parse_objectives
from tailbudget.budget.policy import parse_policy
from tailbudget.errors import TailbudgetError
from tailbudget.logs import ReadOptions
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.batch import Batch
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.live import LiveModel, ModelSource
from tailbudget.sim.model_file import save_model
from tests.sim.synth import doubling_log

T0 = 1_800_000_000.0
SLO_MS = 1000.0
SCALE_AT_MS = 0.9 * SLO_MS
"""The reactive rules' scale-up threshold (90% of the SLO): the breach to get ahead of."""
PER_REPLICA = 4 / 0.113
"""Requests/s one replica of the generated service serves (4 slots, ~113 ms of work)."""


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("serve-model")
    log = doubling_log(tmp / "doubling.parquet")
    model = fit_logs([str(log)], ReadOptions(), ModelOptions(concurrency=4)).model
    return save_model(model, tmp / "model.npz")


def _runtime(tmp_path: Path, model_file: Path) -> Runtime:
    policy = parse_policy(
        {"mode": "model", "replicas": {"min": 2, "max": 10},
         "model": {"cooldown": "3m", "drift_for": "2m"}},
        None,
    )  # fmt: skip
    live = LiveModel(
        ModelSource(str(model_file)), parse_objectives(f"p95={SLO_MS:g}"), policy.model,
        headroom=0.1, bounds=(2, 10), every_s=policy.evaluate_every_s,
    )  # fmt: skip
    config = RuntimeConfig(state_dir=tmp_path / "state", actions=ActionsConfig(log=False))
    return Runtime(policy, config, model=live)


def _latencies(rng: np.random.Generator, n: int, rate: float, replicas: int) -> np.ndarray:
    """The generated service: lognormal work (median 100 ms) plus the M/M/c wait of 4 slots
    a replica (Erlang C), the queue the fitted model describes; past saturation, 30 s."""
    c, mu = 4 * max(1, replicas), 1.0 / 0.113
    a = rate / mu
    work = rng.lognormal(np.log(100.0), 0.5, size=n)
    if a >= c:
        return work + 30_000.0
    terms = sum(a**k / math.factorial(k) for k in range(c))
    last = a**c / math.factorial(c) * c / (c - a)
    waits = rng.random(n) < last / (terms + last)
    return work + waits * rng.exponential(1000.0 / (c * mu - rate), size=n)


def _rate(t: float) -> float:
    """40/s, ramping to 110/s over minutes 5-10, held to minute 15, back to 40/s by 20."""
    m = t / 60.0
    if m < 5 or m >= 20:
        return 40.0
    if m < 10:
        return 40.0 + 70.0 * (m - 5) / 5
    return 110.0 if m < 15 else 110.0 - 70.0 * (m - 15) / 5


def test_serve_ramp_scales_before_breach_and_back(tmp_path: Path, model_file: Path) -> None:
    rt = _runtime(tmp_path, model_file)
    rng = np.random.default_rng(5)
    ready: list[int] = []  # replicas taking work per second (ready 30 s after asked)
    rises: list[tuple[float, float | None]] = []
    desired = [rt.replicas.desired]
    for sec in range(30 * 60):
        now = T0 + sec
        ready.append(desired[max(0, sec - 30)])
        rate = _rate(sec)
        n = int(rng.poisson(rate))
        if n:
            rt.ingest(
                Batch(np.full(n, now), _latencies(rng, n, rate, ready[-1]), np.zeros(n, bool))
            )
        if sec % 10 == 9:
            before = rt.replicas.desired
            rt.evaluate(now + 1)
            if rt.replicas.desired > before:
                rises.append((sec, rt.controller.window_stats(now + 1).p95))
        desired.append(rt.replicas.desired)
    status = rt.status(T0 + 30 * 60)
    rt.close()
    # desired replicas rise while the measured p95 is still under the rules' threshold
    assert rises and rises[0][0] < 10 * 60
    assert all(p95 is None or p95 < SCALE_AT_MS for _, p95 in rises), (rises, desired[::60])
    assert max(desired) >= 4
    # and fall back after the ramp (the model's scale-down, one cooldown after)
    assert desired[-1] == 2, (status["model"]["reason"], status["model"]["load"], desired[::60])
    model = status["model"]
    assert model["source"].startswith("file ") and model["fitted_at"].endswith("Z")
    assert set(model) >= {"parameters", "predicted", "measured", "error", "drifting"}
    assert "forecast" in status["desired_replicas_reason"]
    assert status["policy"]["mode"] == "model"


def test_refit_without_observations_is_refused(tmp_path: Path, model_file: Path) -> None:
    rt = _runtime(tmp_path, model_file)
    with pytest.raises(TailbudgetError, match="refit needs at least"):
        rt.refit_model()
    n = 500
    rt.ingest(Batch(np.full(n, T0), np.full(n, 150.0), np.zeros(n, bool)))
    rt.evaluate(T0 + 1)
    assert "re-centred" in rt.refit_model()
    assert rt.status(T0 + 2)["model"]["refits"] == 1
    rt.close()


def test_scheduled_refit(tmp_path: Path, model_file: Path) -> None:
    policy = parse_policy({"mode": "model", "model": {"refit_every": "1m"}}, None)
    assert policy.model.refit_every_s == 60.0
    live = LiveModel(
        ModelSource(str(model_file)), parse_objectives(f"p95={SLO_MS:g}"), policy.model,
        headroom=0.1, bounds=(1, 10), every_s=10.0,
    )  # fmt: skip
    live.evaluate(T0, 2)
    assert live.refits == 0
    live.evaluate(T0 + 61, 2)  # due, but nothing observed yet: skipped, and says why
    assert live.refits == 0 and "skipped" in (live.last_refit or "")
    live.observe(np.full(300, T0 + 62), np.full(300, 150.0), np.zeros(300, bool))
    live.evaluate(T0 + 63, 2)
    live.evaluate(T0 + 125, 2)
    assert live.refits == 1 and (live.last_refit or "").startswith("scheduled: work re-centred")
