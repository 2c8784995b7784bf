"""Audit per class on the planted tiered log (tailbudget.demo.tiers) and on a real vLLM
run split into prompt-length terciles: each class's figure within 1% of numpy's on the
class's own rows, verdicts by the audit's rule, the class's own driver, the gate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tailbudget.demo.tiers import BUDGET, SHARES, tiered
from tests._data import DATA

runner = CliRunner()


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[pd.DataFrame, Path, Path]:
    tmp = tmp_path_factory.mktemp("tiers")
    df = tiered()
    log, budget = tmp / "tiers.parquet", tmp / "tiers.yaml"
    df.to_parquet(log, index=False)
    budget.write_text(BUDGET)
    return df, log, budget


@pytest.fixture(scope="module")
def cli_json(planted) -> dict:
    _, log, budget = planted
    result = runner.invoke(
        app, ["audit", str(log), "--budget", str(budget), "-f", "json", "--fail-on-breach"]
    )
    assert result.exit_code == 1, result.output
    assert "class premium e2e.p95" in result.output.splitlines()[-1]
    return json.loads(result.stdout[: result.stdout.rindex("}") + 1])


def test_the_planted_log_is_what_it_says(planted) -> None:
    df = planted[0]
    assert np.percentile(df.total_ms, 99) < 1500  # the whole service passes its p99
    premium = df[df.tier == "premium"]
    assert abs(len(premium) / len(df) - SHARES["premium"]) < 0.01
    assert 1.25 < np.percentile(premium.total_ms, 95) / 800 < 1.45  # ~35% over its p95


def test_each_class_measured_on_its_own_rows(planted, cli_json) -> None:
    df = planted[0]
    rows = {c["name"]: c for c in cli_json["classes"]}
    assert list(rows) == ["premium", "standard", "batch"]
    expected = {"premium": ("p95", "breach"), "standard": ("p99", "pass"), "batch": ("p99", "pass")}
    for name, (p, verdict) in expected.items():
        mine = df[df.tier == name].total_ms
        c = rows[name]
        assert c["requests"] == len(mine)
        (o,) = c["objectives"]
        want = np.percentile(mine, float(p[1:]))
        assert o["percentile"] == p and abs(o["measured_ms"] / want - 1) < 0.01
        assert o["verdict"] == verdict and o["gated"] is True
    assert cli_json["class_by"] == "tier"
    # The service passes; its tail is driven by the LLM, premium's by its reranker.
    assert cli_json["snapshot"]["verdict"]["p99"] == "pass"
    assert cli_json["tail"]["driver"] != "rerank"
    assert rows["premium"]["driver"] == "rerank"
    assert "rerank" in rows["premium"]["objectives"][0]["driver"]
    assert cli_json["recommendation"]["choice"] != "none"
    assert cli_json["recommendation"]["text"].startswith("Class premium")


def test_api_agrees_with_cli(planted, cli_json) -> None:
    df, _, budget = planted
    report = tb.audit(df, budget=budget)
    api = json.loads(report.to_json())
    strip = ("provenance",)
    assert {k: v for k, v in api.items() if k not in strip} == {
        k: v for k, v in cli_json.items() if k not in strip
    }
    assert report.breaches_gate()
    # The same classes stated on the SLO string instead of a budget file.
    said = tb.audit(
        df, "p99=1500,premium:p95=800,standard:p99=1500,batch:p99=6000", class_by="tier"
    )
    assert said.classes is not None and report.classes is not None
    assert [o.model_dump() for c in said.classes for o in c.objectives] == [
        o.model_dump() for c in report.classes for o in c.objectives
    ]


def test_markdown_and_html_show_the_classes(planted) -> None:
    df, _, budget = planted
    report = tb.audit(df, budget=budget)
    md = report.to_markdown()
    assert "## Classes" in md and "| `premium` |" in md
    assert md.splitlines()[2].startswith("**Breach: class premium e2e.p95 over target")
    html = report.to_html()
    assert 'id="classes"' in html and "tb-class-cdf-0" in html and "tb-class-cdf-2" in html


def test_without_classes_nothing_changes(planted) -> None:
    report = tb.audit(planted[0], "p99=1500")
    assert report.classes is None and "classes" not in json.loads(report.to_json())
    assert "## Classes" not in report.to_markdown()


def test_class_by_alone_shows_each_value_ungated(planted) -> None:
    report = tb.audit(planted[0], "p99=1000", class_by="tier")
    assert report.classes is not None
    assert {c.name for c in report.classes} == set(SHARES)
    assert all(not c.listed and not any(o.gated for o in c.objectives) for c in report.classes)
    premium = next(c for c in report.classes if c.name == "premium")
    assert premium.objectives[0].verdict == "breach"  # shown, but judged with the service
    assert not report.class_breaches()


def test_a_small_class_is_inconclusive_not_silent(planted) -> None:
    df = planted[0].copy()
    few = df.index[df.tier == "standard"][:40]
    df.loc[few, "tier"] = "trial"  # 40 requests: too few for a p99 that they meet
    report = tb.audit(df, "p99=1500,trial:p99=5000", class_by="tier")
    trial = next(c for c in report.classes or [] if c.name == "trial")
    assert trial.requests == 40 and trial.objectives[0].verdict == "inconclusive"
    assert not report.breaches_gate()


def test_a_listed_class_without_requests_has_no_data(planted) -> None:
    report = tb.audit(planted[0], "p99=1500,gold:p95=500", class_by="tier")
    gold = next(c for c in report.classes or [] if c.name == "gold")
    assert gold.requests == 0 and gold.objectives[0].verdict == "no_data"


def test_real_vllm_run_by_prompt_length_terciles() -> None:
    path = DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_01.json"
    df = tb.read(path).to_pandas()
    df["length"] = pd.qcut(df.input_tokens, 3, labels=["short", "medium", "long"]).astype(str)
    report = tb.audit(
        df,
        "ttft.p95=2000,short:ttft.p95=150,medium:ttft.p95=150,long:ttft.p95=150",
        class_by="length",
        stage=["ttft", "decode"],
    )
    rows = {c.name: c for c in report.classes or []}
    for name, mine in df.groupby("length"):
        (o,) = rows[name].objectives
        want = float(np.percentile(mine.ttft, 95))
        assert abs((o.measured_ms or 0) / want - 1) < 0.01
        assert o.verdict == ("breach" if want > 150 else "pass")
    # Prefill grows with the prompt: the long tercile alone misses 150 ms.
    assert [rows[n].objectives[0].verdict for n in ("short", "medium", "long")] == [
        "pass",
        "pass",
        "breach",
    ]
    assert report.breaches_gate() and "class long" in report.recommendation.text.lower()


def test_a_small_class_with_a_proven_breach_is_a_breach(planted) -> None:
    df = planted[0].copy()
    few = df.index[df.tier == "standard"][:40]
    df.loc[few, "tier"] = "trial"
    # 40 requests, far too few to pass a p99, yet most of them over 500 ms proves a breach.
    report = tb.audit(df, "p99=1500,trial:p99=500", class_by="tier")
    trial = next(c for c in report.classes or [] if c.name == "trial")
    assert trial.objectives[0].verdict == "breach" and report.breaches_gate()
