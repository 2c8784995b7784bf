"""The fit table on real files: each run replayed on its own arrivals, in every output, and no
policy verdict from a model that does not reproduce its data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tailbudget
from tailbudget.logs import ReadOptions
from tailbudget.sim.batch_engine import run_batching
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.inputs import read_logged
from tailbudget.sim.model import Param
from tailbudget.sim.own_runs import _with_hits, own_runs
from tailbudget.sim.policies import FixedPolicy
from tailbudget.sim.replay_one import replay_one

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TP8 = DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"
GRID = DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_{}.json"
AIPERF = DATA / "aiperf_profile_export.jsonl"
KEYS = {"source", "load", "figure", "measured_ms", "predicted_ms", "error"}


def _need(path: Path) -> None:
    if not path.is_file():
        pytest.skip("shared data not present")


@pytest.fixture(scope="module")
def tp8_json() -> dict:  # type: ignore[type-arg]
    _need(TP8)
    rep = tailbudget.simulate(TP8, "ttft.p95=1000,tpot.p99=100", policy="fixed")
    return json.loads(json.dumps(rep.json_data()))  # type: ignore[no-any-return]


def test_simulate_json_carries_the_fit_table(tp8_json: dict) -> None:  # type: ignore[type-arg]
    fit = tp8_json["fit"]
    assert {r["figure"] for r in fit} == {
        "ttft.p50", "ttft.p95", "ttft.p99", "tpot.p50", "tpot.p99", "itl.p99", "e2e.p99",
    }  # fmt: skip
    assert all(set(r) == KEYS for r in fit)
    assert tp8_json["reproduces"] is True
    for r in fit:
        assert r["error"] == pytest.approx(r["predicted_ms"] / r["measured_ms"] - 1, abs=1e-3)
        assert abs(r["error"]) <= (0.10 if r["figure"].endswith("p50") else 0.20)


def test_simulate_agrees_with_the_audit_on_its_own_log(tp8_json: dict) -> None:  # type: ignore[type-arg]
    # the case: simulate predicted ttft.p95 1,716 ms where audit measures 448
    key = "{metric}.{percentile}".format
    predicted = {key(**o): o["measured_ms"] for o in tp8_json["objectives"]}
    recorded = {f["objective"]: f["measured_ms"] for f in tp8_json["log_measured"]}
    assert recorded["ttft.p95"] == pytest.approx(448, rel=0.01)
    assert predicted["ttft.p95"] == pytest.approx(recorded["ttft.p95"], rel=0.20)
    verdicts = {key(**o): o["verdict"] for o in tp8_json["objectives"]}
    assert verdicts["ttft.p95"] == next(
        f["verdict"] for f in tp8_json["log_measured"] if f["objective"] == "ttft.p95"
    )


def test_capacity_carries_the_fit_table_in_every_format() -> None:
    _need(TP8)
    rep = tailbudget.capacity(TP8, "ttft.p95=1000", load="1")
    doc = rep.json_data()
    assert doc["reproduces"] is True and len(doc["fit"]) == 7
    assert "## Fit: the model on its own runs" in rep.to_markdown()
    assert "Fit: the model on its own runs" in rep.to_html()


def test_no_policy_verdict_from_a_model_that_does_not_reproduce() -> None:
    # a stated batch limit of 4 sequences cannot serve the burst the log recorded: the fit
    # table says which figures fail, and neither simulate nor capacity gives a verdict
    _need(TP8)
    rep = tailbudget.simulate(TP8, "ttft.p95=1000", policy="fixed", concurrency=4)
    doc = rep.json_data()
    assert doc["reproduces"] is False
    bad = [r for r in doc["fit"] if abs(r["error"]) > 0.2]
    assert bad
    text = rep.to_markdown()
    assert "No policy verdict: the model does not reproduce the runs it was fitted on" in text
    assert bad[0]["figure"] in text
    assert "meets every gated objective" not in text and "Every policy breaches" not in text
    cap = tailbudget.capacity(TP8, "ttft.p95=1000", load="1", concurrency=4)
    assert "No policy verdict" in cap.to_markdown()


def test_aiperf_log_reproduced_on_its_own_times() -> None:
    _need(AIPERF)
    model = fit_logs([str(AIPERF)], ReadOptions(), ModelOptions()).model
    assert model.fit is not None and model.fit.rows
    assert {r.load for r in model.fit.rows} == {"its own times"}
    assert model.reproduces is True, [r.describe() for r in model.fit.failures]


@pytest.mark.parametrize("ingest", [0.0, 1.5])
@pytest.mark.parametrize("hit", [0.0, 0.6])
def test_fit_replay_is_the_engine(ingest: float, hit: float) -> None:
    # the fit's one-replica loop gives the engine's first-token and finish times exactly
    _need(Path(str(GRID).format("01")))
    paths = [str(GRID).format(q) for q in ("01", "04", "inf")]
    pairs = [read_logged(p, ReadOptions()) for p in paths]
    model = fit_logs(paths[2:], ReadOptions(), ModelOptions()).model
    assert model.llm is not None
    m = _with_hits(model, hit)
    assert m.llm is not None
    llm = m.llm.__class__(**{**m.llm.__dict__, "ingest_ms": Param("ingest_ms", ingest, "ms", "stated"),
                             "batch_limit": Param("batch_limit", 64, "count", "stated")})  # fmt: skip
    m = m.__class__(**{**m.__dict__, "llm": llm})
    for run in (own_runs([lg], [ex])[0] for lg, ex in pairs):  # each at offset 0 of 200 rows
        arr = run.arrivals(0)
        assert m.llm is not None
        first, done, steps, _, _ = replay_one(m.llm, arr.t_s, run.input_tokens, run.output_tokens)
        end = float(arr.t_s[-1]) + 1.0
        trace = run_batching(m, arr, FixedPolicy(1), replicas=1, end_s=end, record_steps=True)
        assert trace.ttft_s is not None and trace.step_ms is not None
        assert np.array_equal(first, trace.ttft_s) and np.array_equal(done, trace.done_s)
        assert np.array_equal(steps, trace.step_ms)
