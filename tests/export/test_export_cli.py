"""`tailbudget export` and `tailbudget import openslo` from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from export_helpers import TEMPLATES
from typer.testing import CliRunner

from tailbudget.budget import load_budget
from tailbudget.cli import app
from tailbudget.export import TARGETS
from tests.fleet_exports import TTFT_ONLY

RAG = str(TEMPLATES[[p.stem for p in TEMPLATES].index("rag")])
runner = CliRunner()


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_target_writes_parseable_output(target: str, tmp_path: Path) -> None:
    out = tmp_path / "out" / f"{target}.txt"
    result = runner.invoke(app, ["export", RAG, "--to", target, "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    if target == "grafana":
        assert json.loads(text)["title"] == "tailbudget: rag-chat"
    else:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
        assert docs


def test_stdout_and_options() -> None:
    result = runner.invoke(
        app,
        [
            "export",
            RAG,
            "--to",
            "keda",
            "--prometheus-url",
            "http://p:9090",
            "-n",
            "ml",
            "--scale-target",
            "rag-api",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.stdout)
    assert doc["metadata"]["namespace"] == "ml"
    assert doc["spec"]["scaleTargetRef"]["name"] == "rag-api"
    assert doc["spec"]["triggers"][0]["metadata"]["serverAddress"] == "http://p:9090"
    burn = runner.invoke(app, ["export", RAG, "--to", "prometheus-rules", "--burn", "2h/10m:10"])
    assert burn.exit_code == 0 and "TailbudgetErrorBudgetBurn2h" in burn.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", RAG, "--to", "nomad"], "--to must be one of"),
        (["export", "missing.yaml", "--to", "keda"], "budget file not found"),
        (["export", RAG, "--to", "prometheus-rules", "--burn", "1h"], "LONG/SHORT:FACTOR"),
        (["import", "openslo", "missing.yaml"], "file not found"),
        (["import", "sloth", RAG], "import reads: openslo"),
        (["import", "openslo", RAG], "no OpenSLO document of kind SLO"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_bad_policy_block_is_exit_2(tmp_path: Path) -> None:
    data = yaml.safe_load(Path(RAG).read_text())
    data["policy"] = {"rules": [{"metric": "p95", "threshold": "90% of p42", "action": "scale_up"}]}
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["export", str(path), "--to", "keda"])
    assert result.exit_code == 2 and result.stderr.startswith("error: policy.rules[0]")


def test_export_then_import_from_the_shell(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    slo = tmp_path / "slo.yaml"
    budget = tmp_path / "budget.yaml"
    base = [sys.executable, "-m", "tailbudget"]
    subprocess.run(
        [*base, "export", RAG, "--to", "openslo", "-o", str(slo)], check=True, env=env, timeout=60
    )
    subprocess.run(
        [*base, "import", "openslo", str(slo), "-o", str(budget)], check=True, env=env, timeout=60
    )
    assert load_budget(budget).slo == load_budget(RAG).slo


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("metrics", ["vllm", "sglang", "tgi"])
def test_every_target_takes_a_fleet_preset(target: str, metrics: str, tmp_path: Path) -> None:
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(TTFT_ONLY))
    result = runner.invoke(app, ["export", str(path), "--to", target, "--metrics", metrics])
    if target == "keda" and metrics == "tgi":  # TGI has no TTFT: nothing to scale on
        assert result.exit_code == 2 and "no scale_up rule on a percentile tgi" in result.stderr
        return
    assert result.exit_code == 0, result.output
    if target == "grafana":
        assert metrics in json.loads(result.stdout)["tags"]
    else:
        assert [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def test_a_preset_that_maps_no_objective_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump({**TTFT_ONLY, "slo": {"ttft": {"p95": 500}}}))
    result = runner.invoke(app, ["export", str(path), "--to", "openslo", "--metrics", "tgi"])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --metrics tgi: no objective of the budget maps to a tgi")
    assert "ttft.p95: tgi exports no ttft histogram" in line
