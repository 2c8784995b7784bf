"""`tailbudget serve --model FILE` on loopback: the model policy's status, metrics and refit."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from tailbudget.cli import app
from tailbudget.logs import ReadOptions
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.model_file import save_model
from tests.integration.test_serve import TOKEN, Server
from tests.sim.synth import doubling_log

pytestmark = pytest.mark.integration

BUDGET = """\
service: model-svc
slo: {p95: 1000}
pipeline:
  - stage: work
    budget: {p95: 900}
policy:
  mode: model
  window: 10s
  evaluate_every: 1s
  min_samples: 5
  replicas: {min: 2, max: 10}
"""


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serve-model")
    fitted = fit_logs(
        [str(doubling_log(root / "log.parquet"))], ReadOptions(), ModelOptions(concurrency=4)
    )
    return save_model(fitted.model, root / "model.npz")


def test_serve_with_a_model_file(tmp_path: Path, model_file: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    budget = tmp_path / "budget.yaml"
    budget.write_text(BUDGET)
    srv = Server(
        tmp_path / "state", token_file=token, budget=budget, extra=("--model", str(model_file))
    ).start()
    try:
        for _ in range(4):
            now = time.time()
            items = [{"ts": now, "total_ms": 120.0 + i % 50} for i in range(60)]
            assert srv.post(items).status_code == 200
            time.sleep(0.6)
        deadline = time.monotonic() + 20
        while srv.status()["model"]["load"]["rate_per_s"] == 0 and time.monotonic() < deadline:
            time.sleep(0.3)
        status = srv.status()
        model = status["model"]
        assert model["source"] == f"file {model_file}"
        assert model["fitted_at"].endswith("Z") and model["parameters"]
        assert model["load"]["rate_per_s"] > 0 and "Holt" in model["load"]["forecast"]
        assert "e2e.p95" in model["predicted"] and model["drifting"] is False
        assert status["policy"]["mode"] == "model"
        assert status["desired_replicas"] >= 2 and "forecast" in status["desired_replicas_reason"]
        text = httpx.get(f"{srv.url}/metrics", timeout=10).text
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"tailbudget_model_predicted_seconds", "tailbudget_model_drifting"} <= names
        assert "tailbudget_desired_replicas" in names  # what the KEDA export scales on
        url = f"{srv.url}/v1/model/refit"
        assert httpx.post(url, timeout=10).status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        # The model takes observations in at its evaluation ticks, so the last batch may not
        # have reached it yet: a 409 ("refit needs at least ...") until the next tick.
        deadline = time.monotonic() + 20
        refit = httpx.post(url, headers=auth, timeout=30)
        while refit.status_code == 409 and time.monotonic() < deadline:
            time.sleep(0.3)
            refit = httpx.post(url, headers=auth, timeout=30)
        assert refit.status_code == 200, refit.text
        assert "re-centred on the last 240" in refit.json()["refit"]
        assert srv.status()["model"]["refits"] == 1
    finally:
        srv.stop()


def test_model_mode_without_a_model_is_one_error_line(tmp_path: Path) -> None:
    budget = tmp_path / "budget.yaml"
    budget.write_text(BUDGET)
    res = CliRunner().invoke(
        app, ["serve", "--budget", str(budget), "--state-dir", str(tmp_path / "s")]
    )
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "error: --model: the budget's policy is the model policy: give a model file or logs to "
        "fit it from"
    ]
