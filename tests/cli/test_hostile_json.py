"""Strict JSON from every command on hostile logs (latencies of 1e308, a mix of extremes,
an empty stage column), and no verdict from no data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget._json import dumps
from tailbudget.cli import app
from tests._json import strict_json
from tests.cli._inputs import BUDGET

runner = CliRunner()


def _write(path: Path, rows: list[tuple[float, float, float | None]]) -> Path:
    lines = ["ts,total_ms,db_ms,llm_ms,error"]
    for i, (total, db, llm) in enumerate(rows):
        cell = "" if db is None else repr(db)
        lines.append(f"{1_700_000_000 + i},{total!r},{cell},{llm!r},0")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("json")
    rng = np.random.default_rng(2)
    base = rng.lognormal(5, 0.5, 400)
    mixed = []
    for i, t in enumerate(base):
        t = 1e308 if i % 7 == 0 else (5e-324 if i % 11 == 0 else float(t))
        mixed.append((t, min(t, 1e307) / 3, t / 2))
    (d / "b.yaml").write_text(BUDGET)
    return {
        "mixed": _write(d / "mixed.csv", mixed),
        "huge": _write(d / "huge.csv", [(1e308, 1e307, 1e307)] * 400),
        "empty_stage": _write(d / "empty.csv", [(float(t), None, float(t) / 2) for t in base]),
        "budget": d / "b.yaml",
    }


COMMANDS = {
    "audit": lambda L, B: ["audit", L, "--slo", "p99=900"],
    "audit-budget": lambda L, B: ["audit", L, "--budget", B],
    "rebudget": lambda L, B: ["rebudget", B, L],
    "replay": lambda L, B: ["replay", L],
    "simulate": lambda L, B: ["simulate", L, "--slo", "p95=800", "--duration", "5m"],
    "capacity": lambda L, B: ["capacity", L, "--slo", "p95=800", "--duration", "5m", "--load", "1"],
}


@pytest.mark.parametrize("kind", ["mixed", "huge", "empty_stage"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_answers_strict_json_or_one_line(logs, kind, command):
    args = COMMANDS[command](str(logs[kind]), str(logs["budget"]))
    result = runner.invoke(app, [*args, "--format", "json"])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code in (0, 1, 2), result.output[-2000:]
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
        return
    start = result.output.index("{")
    strict_json(result.output[start:])


def test_rebudget_on_overflowing_latencies_is_one_line(logs):
    result = runner.invoke(app, ["rebudget", str(logs["budget"]), str(logs["huge"])])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "beyond the 1e+12 ms a budget can hold" in lines[0]


def test_an_objective_on_an_empty_stage_is_inconclusive_not_a_pass(logs):
    args = ["audit", str(logs["empty_stage"]), "--slo", "p99=900,db.p99=300"]
    result = runner.invoke(app, [*args, "--format", "json", "--fail-on-breach"])
    assert result.exit_code == 0, result.output
    db = next(o for o in strict_json(result.output)["objectives"] if o["metric"] == "db")
    assert db["verdict"] == "inconclusive" and db["measured_ms"] is None
    assert "no time recorded for db" in db["note"]
    md = runner.invoke(app, [*args, "--format", "md"]).output
    assert "| db p99 | 300 | n/a | inconclusive |" in md


def test_a_simulated_run_of_one_request_gets_no_verdict(logs):
    args = ["simulate", str(logs["empty_stage"]), "--slo", "p95=800", "--arrivals", "burst:1"]
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    obj = strict_json(result.output)["objectives"][0]
    assert obj["verdict"] == "inconclusive" and obj["n"] == 1
    # the one verdict rule: within the target on 1 request, too few for a pass on p95
    assert "0 of 1 requests over 800 ms" in obj["note"]
    assert "p95 needs 20 requests for a pass (19 more)" in obj["note"]
    md = runner.invoke(app, [*args]).output
    assert "too few to settle e2e.p95 (inconclusive)" in md
    assert "meets every gated objective" not in md


def test_the_writer_says_which_figures_it_nulled():
    doc = strict_json(
        dumps({"a": float("inf"), "b": [1.0, float("nan")], "notes": []}, explain=True)
    )
    assert doc["a"] is None and doc["b"] == [1.0, None]
    assert doc["notes"] == [
        "2 figures could not be computed as a finite number (an overflow, or no data) "
        "and are null: a, b[1]"
    ]
    assert strict_json(dumps({"a": 1.0}, explain=True)) == {"a": 1.0}


def test_rebudget_agrees_with_the_audit_on_an_empty_stage(logs, tmp_path):
    budget = tmp_path / "b.yaml"
    budget.write_text(
        BUDGET.replace(
            "slo: {p50: 300, p95: 800, p99: 1500}",
            "slo:\n  e2e: {p99: 1500}\n  stages: {db: {p99: 300}}",
        )
    )
    log = str(logs["empty_stage"])
    proposal = strict_json(
        runner.invoke(app, ["rebudget", str(budget), log, "--format", "json"]).output
    )
    audit = strict_json(
        runner.invoke(app, ["audit", log, "--budget", str(budget), "--format", "json"]).output
    )
    in_rebudget = next(o for o in proposal["objectives"] if o["objective"] == "db.p99")
    in_audit = next(o for o in audit["objectives"] if o["metric"] == "db")
    assert in_rebudget["verdict"] == in_audit["verdict"] == "inconclusive"
    assert in_rebudget["measured_ms"] is None and in_audit["measured_ms"] is None


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_text_figures_never_read_inf_or_nan(logs, fmt):
    result = runner.invoke(app, ["audit", str(logs["mixed"]), "--slo", "p99=900", "--format", fmt])
    assert result.exit_code == 0, result.output
    for word in ("inf ms", "nan%", "Infinity", "NaN"):
        assert word not in result.stdout, word
    assert "000,000,000,000,000" not in result.stdout  # 1e308 ms is shown short
