"""Every command both ways on the real recorded logs: the CLI's `--format json` is the
API report's `.to_json()` (provenance aside: where the data came from, and when)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pyarrow.csv as pacsv
import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tailbudget.cli.init import template_text
from tests.api.data import DELAG, NEZHA, VLLM_01

pytestmark = pytest.mark.skipif(not DELAG.exists(), reason="needs ../shared/data")
runner = CliRunner()
AUDIT = ["--slo", "p99=500", "--total", "Latency", "--stages", "*Controller*,Gateway*"]
COLUMNS = {"total": "Latency", "stages": "*Controller*,Gateway*"}
LLM_SLO = "ttft.p95=500,tpot.p95=60"


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def cli_json(*args: str) -> Any:
    return json.loads(cli(*args, "--format", "json"))


def same(cli_doc: Any, api_json: str, *, drop: tuple[str, ...] = ()) -> None:
    api_doc = json.loads(api_json)
    for doc in (cli_doc, api_doc):
        for key in drop:
            doc.pop(key, None)
    assert api_doc == cli_doc


def without_provenance(doc: Any) -> Any:
    prov = doc["provenance"]
    for key in ("source", "format", "generated_at"):
        prov.pop(key)
    return doc


@pytest.fixture(scope="module")
def audit_cli() -> Any:
    return without_provenance(cli_json("audit", str(DELAG), *AUDIT))


@pytest.mark.parametrize(
    "load",
    [
        lambda: pd.read_csv(DELAG),
        lambda: pl.read_csv(DELAG),
        lambda: pacsv.read_csv(DELAG),
        lambda: str(DELAG),
    ],
    ids=["pandas", "polars", "arrow", "path"],
)
def test_audit(audit_cli, load):
    report = tb.audit(load(), slo="p99=500", **COLUMNS)
    assert without_provenance(json.loads(report.to_json())) == audit_cli
    assert report.to_json() == report.to_json()  # deterministic, strict
    html = report._repr_html_()
    assert html.startswith("<!DOCTYPE html>") and "<script src=" not in html
    assert report._repr_markdown_() == report.to_markdown()


def test_audit_takes_the_slo_as_a_dict_or_objectives(audit_cli):
    frame = pd.read_csv(DELAG)
    for slo in ({"p99": 500}, tb.Objectives((tb.Objective("e2e", "p99", 500.0),))):
        got = without_provenance(json.loads(tb.audit(frame, slo=slo, **COLUMNS).to_json()))
        assert got == audit_cli


@pytest.fixture(scope="module")
def budget_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("budget") / "rag.yaml"
    path.write_text(template_text("rag"), encoding="utf-8")
    return path


def test_plan(budget_file):
    same(cli_json("plan", str(budget_file)), tb.plan(budget_file).to_json())
    same(cli_json("plan", str(budget_file)), tb.plan(budget_file.read_text()).to_json())


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("measured") / "eshopper.yaml"
    text = cli("init", "--from", str(DELAG), *AUDIT, "-o", str(path))
    assert text == ""
    return path


def test_measure_budget_is_init_from(measured):
    api = tb.measure_budget(DELAG, slo="p99=500", **COLUMNS)
    assert api.text == measured.read_text(encoding="utf-8")
    assert api.fits is not None
    frame = tb.measure_budget(pd.read_csv(DELAG), slo="p99=500", service=DELAG.stem, **COLUMNS)
    # the first line names where the log came from
    assert frame.text.split("\n", 1)[1] == api.text.split("\n", 1)[1]


def test_rebudget(measured):
    doc = cli_json("rebudget", str(measured), str(DELAG))
    same(doc, tb.rebudget(measured, DELAG).to_json())
    frame = json.loads(tb.rebudget(measured, pd.read_csv(DELAG)).to_json())
    # the proposed file's first line names where the log came from
    assert frame.pop("budget").split("\n", 1)[1] == doc["budget"].split("\n", 1)[1]
    same(doc, json.dumps(frame), drop=("source", "budget", "diff"))


def test_replay():
    doc = cli_json("replay", str(NEZHA))
    same(doc, tb.replay(NEZHA).to_json())
    same(doc, tb.replay(pd.read_csv(NEZHA)).to_json(), drop=("source", "format"))


def test_simulate():
    args = ("simulate", str(VLLM_01), "--slo", LLM_SLO, "--policy", "budget")
    same(cli_json(*args), tb.simulate(VLLM_01, slo=LLM_SLO, policy="budget").to_json())


def test_capacity():
    args = ("capacity", str(VLLM_01), "--slo", LLM_SLO, "--load", "1,2")
    same(cli_json(*args), tb.capacity(VLLM_01, slo=LLM_SLO, loads=[1, 2]).to_json())


def test_export(budget_file):
    for target in ("prometheus-rules", "keda"):
        text = cli("export", str(budget_file), "--to", target)
        assert text == tb.export(budget_file, to=target)
