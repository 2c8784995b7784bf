"""`tailbudget replay` on the command line: formats, baselines, bad input -> exit 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget.cli import app

from .synth import const, synth, to_parquet, write_csv

runner = CliRunner()
SRC = Path(__file__).resolve().parents[2] / "src"


def _ramp_log(tmp_path: Path) -> Path:
    def ramp(t):
        return np.interp(t, [0, 300, 900], [900, 900, 3400])

    return to_parquet(synth(1200, 10, ramp, seed=11), tmp_path / "ramp.parquet")


@pytest.mark.parametrize("unit", ["ns", "us"])
def test_parquet_time_units(tmp_path: Path, unit: str) -> None:
    log = synth(300, 10, const(2500), seed=15)
    path = to_parquet(log, tmp_path / f"{unit}.parquet", unit=unit)
    res = runner.invoke(app, ["replay", str(path), "-f", "json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["rows"]["used"] == log.ts_s.size
    assert rep["decisions"][0]["action"] == "scale_up"
    assert rep["duration_s"] == pytest.approx(log.ts_s[-1] - log.ts_s[0], abs=1e-3)


def test_json_to_file(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["replay", str(_ramp_log(tmp_path)), "-f", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    actions = [d["action"] for d in rep["decisions"]]
    assert "scale_up" in actions and "shed_load" in actions
    for d in rep["decisions"]:
        assert {"t", "t_offset_s", "action", "metric", "value", "threshold", "reason"} <= set(d)
    assert "no baseline: p99 rollback rule inactive" in rep["notes"]


def test_text_and_html(tmp_path: Path) -> None:
    log = _ramp_log(tmp_path)
    res = runner.invoke(app, ["replay", str(log), "--format", "text", "--baseline-p99", "2500"])
    assert res.exit_code == 0, res.output
    assert "scale_up" in res.output and "baseline p99 2,500 ms" in res.output
    html = tmp_path / "r.html"
    res = runner.invoke(app, ["replay", str(log), "--format", "html", "-o", str(html)])
    assert res.exit_code == 0, res.output
    assert "<html" in html.read_text().lower()


def test_budget_policy_and_columns(tmp_path: Path) -> None:
    log = synth(900, 10, const(1500), seed=12)
    path = tmp_path / "log.csv"
    write_csv(path, {"when": log.ts_s, "lat": log.total_ms}, time_col="when")
    budget = tmp_path / "b.yaml"
    budget.write_text(
        "service: fraud\nenvironment: qa\nslo: {p95: 2000}\npipeline:\n  - stage: model\n"
        "    budget: {p95: 1500}\nlog: {timestamp: when, total: lat}\n"
        "policy:\n  rules:\n    - {name: early, metric: p95, threshold: 50% of p95,"
        " action: scale_up}\n"
    )
    res = runner.invoke(app, ["replay", str(path), "--budget", str(budget), "-f", "json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["service"] == "fraud"
    assert rep["decisions"] and rep["decisions"][0]["rule"] == "early"
    assert rep["decisions"][0]["threshold"] == 1000.0


def test_baseline_window_and_baseline_log(tmp_path: Path) -> None:
    log = _ramp_log(tmp_path)
    res = runner.invoke(app, ["replay", str(log), "--baseline-window", "5m", "-f", "json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["baseline_p99_ms"] > 0 and "first 300s" in rep["baseline_source"]
    assert any(d["metric"] == "p99_vs_baseline" for d in rep["decisions"])
    other = to_parquet(synth(600, 10, const(900), seed=13), tmp_path / "base.parquet")
    res = runner.invoke(app, ["replay", str(log), "--baseline", str(other), "-f", "json"])
    assert res.exit_code == 0, res.output
    assert "base.parquet" in json.loads(res.output)["baseline_source"]


def _bad(args: list[str]) -> str:
    res = runner.invoke(app, ["replay", *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    return lines[0]


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    no_ts = tmp_path / "nots.csv"
    write_csv(no_ts, {"total_ms": np.array([1.0, 2.0])})
    line = _bad([str(no_ts)])
    assert line.startswith("error: --timestamp: ") and "replay needs one" in line
    assert re.search("not found|no such file", _bad([str(tmp_path / "missing.parquet")]))
    log = _ramp_log(tmp_path)
    assert "give one baseline" in _bad([str(log), "--baseline-p99", "5", "--baseline-window", "1m"])
    assert "--total: column 'nope' not found" in _bad([str(log), "--total", "nope"])
    assert "--baseline-window" in _bad([str(log), "--baseline-window", "soon"])


def test_subprocess_no_timestamp_exit_2(tmp_path: Path) -> None:
    no_ts = tmp_path / "nots.jsonl"
    no_ts.write_text('{"total_ms": 5}\n{"total_ms": 7}\n')
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "tailbudget", "replay", str(no_ts)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_relative_time_log(tmp_path: Path) -> None:
    log = synth(600, 10, const(2500), seed=14)
    path = tmp_path / "rel.csv"
    offsets = log.ts_s - log.ts_s[0] + 3.0
    write_csv(path, {"t_s": offsets, "total_ms": log.total_ms})
    res = runner.invoke(app, ["replay", str(path), "--timestamp", "t_s", "-f", "json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["start"] == "PT3.000S"
    d = rep["decisions"][0]
    assert d["action"] == "scale_up" and d["t"].startswith("PT")
    assert float(d["t"][2:-1]) == pytest.approx(d["t_offset_s"] + 3.0, abs=1e-3)


def test_text_and_markdown_open_with_the_verdict(tmp_path: Path) -> None:
    # The HTML page opened with the verdict and the open-loop caveat; text and markdown
    # began with the header and buried the caveat. Now all three open the same way.
    from tailbudget.report.replay_text import verdict_line

    log = _ramp_log(tmp_path)
    rep = json.loads(runner.invoke(app, ["replay", str(log), "-f", "json"]).output)
    text = runner.invoke(app, ["replay", str(log), "--format", "text"]).output
    md = runner.invoke(app, ["replay", str(log), "--format", "md"]).output
    html = tmp_path / "r.html"
    runner.invoke(app, ["replay", str(log), "--format", "html", "-o", str(html)])
    first = text.splitlines()[0]
    assert first.startswith("verdict: The policy would have made ")
    assert "scale_up x" in first and text.splitlines()[1] == rep["notes"][0]
    assert text.count("The policy would have made") == 1
    head = md.split("```")[0]
    assert head.splitlines()[2].startswith("**Verdict: The policy would have made ")
    assert rep["notes"][0] in head and md.count(rep["notes"][0]) == 1
    said = first.removeprefix("verdict: ").removesuffix(".")
    assert f"**Verdict: {said}.**" in md
    assert said.replace(",", "") in html.read_text().replace(",", "")
    assert verdict_line  # the one sentence every format opens with
