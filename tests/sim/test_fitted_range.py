"""A rate outside the fitted runs' range is flagged "outside the fitted range" in every
output that uses it (issue 34): simulate's notes and capacity's, in JSON, Markdown and
HTML, and each model-policy decision sized at such a rate."""

from __future__ import annotations

import json

import pytest

import tailbudget as tb
from tests.conftest import SHARED_DATA

GRID = [
    str(SHARED_DATA / "vllm_grid" / f"vllm_llama33-70b_04_tp4_pp2_IB_qps_{q}.json")
    for q in ("01", "04")
]
FLAG = "outside the fitted range (1/s to 4/s)"


@pytest.fixture(scope="module", autouse=True)
def _data() -> None:
    if not all(__import__("os").path.isfile(p) for p in GRID):
        pytest.skip("real data not found")


def test_simulate_flags_its_load_and_the_model_policy_its_decisions() -> None:
    rep = tb.simulate(
        GRID, "ttft.p95=2000,tpot.p99=200", arrivals="poisson:16", duration="120s",
        policy=["model", "fixed:1"],
    )  # fmt: skip
    for text in (rep.to_json(), rep.to_markdown(), rep.to_html()):
        assert "16 requests/s a replica is " + FLAG in text
    doc = json.loads(rep.to_json())
    (model,) = [r for r in doc["runs"] if r["policy"] == "model"]
    sized = [d for d in model["decisions"] if d["rule"] == "model"]
    assert sized, "the model policy scaled up from 1 replica at 16/s"
    for d in sized:  # each says its own forecast rate per replica when outside
        rate = d["reason"].split("/s a replica is outside")[0].rsplit("; ", 1)[-1]
        assert (float(rate) > 4) == (FLAG in d["reason"])


def test_simulate_within_the_fitted_range_says_nothing_of_it() -> None:
    rep = tb.simulate(GRID, "ttft.p95=2000", arrivals="poisson:2", duration="60s", policy="fixed:1")
    assert "outside the fitted range" not in rep.to_json()


def test_capacity_flags_each_load_outside_the_range_on_the_replicas_it_needs() -> None:
    cap = tb.capacity(GRID, "ttft.p95=2000", load="0.5,1")
    doc = json.loads(cap.to_json())
    flagged = [n for n in doc["notes"] if "outside the fitted range" in n]
    assert len(flagged) == 1 and "at 0.5x the log's load" in flagged[0]
    assert FLAG in flagged[0]
    for text in (cap.to_markdown(), cap.to_html()):
        assert "at 0.5x the log&#x27;s load" in text or "at 0.5x the log's load" in text
        assert FLAG in text
