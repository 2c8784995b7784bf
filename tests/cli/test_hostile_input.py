"""The CLI contract under hostile or careless input: one line and exit 2, or the bad
rows counted in the report, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget.budget.yaml_safe import YamlError, load_yaml
from tailbudget.cli import app
from tailbudget.export.common import label_value
from tests.cli._inputs import BUDGET

runner = CliRunner()
SRC = Path(__file__).resolve().parents[2] / "src"


def _one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def log_csv(tmp_path_factory) -> Path:
    """60,000 requests; line 55,002 (row 55,001) has a bad cell; one cohort value holds
    a `|` and a line break."""
    n = 60_000
    rng = np.random.default_rng(5)
    db = rng.lognormal(3, 0.5, n)
    llm = rng.lognormal(5, 0.5, n)
    path = tmp_path_factory.mktemp("hostile") / "log.csv"
    lines = ["ts,total_ms,db_ms,llm_ms,route,error"]
    for i in range(n):
        cell = "n/a" if i == 55_000 else f"{db[i]:.3f}"
        route = '"b|x\ny"' if i % 3 == 0 else "a"
        lines.append(
            f"{1_700_000_000 + i * 0.1:.1f},{db[i] + llm[i] + 5:.3f},{cell},"
            f"{llm[i]:.3f},{route},{int(i % 97 == 0)}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def _audit(log: Path, *args: str):
    return runner.invoke(app, ["audit", str(log), "--format", "json", *args])


def test_a_bad_cell_deep_in_a_csv_is_one_counted_row(log_csv):
    result = _audit(log_csv, "--slo", "p99=900")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert (rows["total"], rows["used"], rows["rejected"]) == (60_000, 59_999, 1)
    assert rows["rejected_reasons"] == {"non_numeric": 1}


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--cohort", "error"], ["--cohort 'error'", "error flag column"]),
        (["--shape", "ts"], ["--shape 'ts'", "timestamp column"]),
        (["--cohort", "total_ms"], ["total latency column"]),
    ],
)
def test_a_column_given_two_roles_is_one_line(log_csv, args, needles):
    _one_line_error(_audit(log_csv, "--slo", "p99=900", *args), *needles)


@pytest.mark.parametrize(
    ("slo", "needle"),
    [
        ("p99=inf", "must be a finite number"),
        ("p99=nan", "must be a finite number"),
        ("p99=" + "9" * 400, "must be a finite number"),
        ("p95=2000,p99=100", "e2e.p99 (100 ms) is below e2e.p95 (2,000 ms)"),
        ("p50=900,p95=800", "e2e.p95 (800 ms) is below e2e.p50 (900 ms)"),
    ],
)
def test_impossible_slos_are_one_line(log_csv, slo, needle):
    _one_line_error(_audit(log_csv, "--slo", slo), needle)


def test_markdown_cells_keep_pipes_and_line_breaks_inside(log_csv):
    result = runner.invoke(
        app, ["audit", str(log_csv), "--slo", "p99=900", "--cohort", "route", "--format", "md"]
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("| route |")]
    assert len(rows) == 2
    assert any("b\\|x y" in row for row in rows)
    assert all(row.endswith("|") for row in rows)


def test_binary_events_file_is_one_line(log_csv, tmp_path):
    events = tmp_path / "events.csv"
    events.write_bytes(b"\x00\xff\xfe\x01binary")
    _one_line_error(_audit(log_csv, "--slo", "p99=900", "--events", str(events)), "not UTF-8 text")


def test_binary_actions_file_is_one_line(tmp_path):
    actions = tmp_path / "actions.yaml"
    actions.write_bytes(b"\x00\xff\xfe\x01binary")
    result = runner.invoke(
        app, ["serve", "--actions", str(actions), "--state-dir", str(tmp_path / "s"), "--port", "1"]
    )
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    if os.geteuid() == 0:  # port 1 binds as root, so the actions file is what stops it
        assert "not UTF-8 text" in result.output


def test_demo_out_file_and_negative_seeds_are_one_line(tmp_path):
    a_file = tmp_path / "taken"
    a_file.write_text("")
    _one_line_error(
        runner.invoke(app, ["demo", "--out", str(a_file), "--rows", "1000"]), "is a file"
    )
    _one_line_error(
        runner.invoke(
            app, ["demo", "--out", str(tmp_path / "d"), "--rows", "1000", "--seed", "-5"]
        ),
        "--seed must be an integer from 0",
    )
    budget = tmp_path / "b.yaml"
    budget.write_text(BUDGET)
    _one_line_error(runner.invoke(app, ["plan", str(budget), "--seed", "-3"]), "--seed")
    _one_line_error(runner.invoke(app, ["plan", str(budget), "--seed", "9" * 400]), "--seed")
    seeded = tmp_path / "seeded.yaml"
    seeded.write_text(BUDGET + "composition: {seed: -1}\n")
    _one_line_error(runner.invoke(app, ["plan", str(seeded)]), "composition.seed")


def test_a_stage_name_with_a_line_break_is_refused(tmp_path):
    budget = tmp_path / "b.yaml"
    budget.write_text(BUDGET.replace("- stage: db", '- stage: "db\\n"'))
    _one_line_error(runner.invoke(app, ["plan", str(budget)]), "stage name")
    service = tmp_path / "s.yaml"
    service.write_text(BUDGET.replace("service: svc", 'service: "svc\\nx"'))
    _one_line_error(runner.invoke(app, ["plan", str(service)]), "service name")
    assert label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_yaml_reads_exponents_refuses_duplicates(tmp_path):
    assert load_yaml("p99: 1e3\nx: -2.5E-2\ny: '1e3'") == {"p99": 1000.0, "x": -0.025, "y": "1e3"}
    budget = tmp_path / "b.yaml"
    budget.write_text(BUDGET.replace("p99: 1500", "p99: 1.5e3"))
    assert runner.invoke(app, ["plan", str(budget), "--format", "json"]).exit_code == 0
    dup = tmp_path / "dup.yaml"
    dup.write_text(BUDGET + "environment: dev\n")
    _one_line_error(
        runner.invoke(app, ["plan", str(dup)]),
        "duplicate key 'environment' at line 9 (first at line 2)",
    )
    with pytest.raises(YamlError, match="duplicate key 'c'"):
        load_yaml("- b: {c: 1, c: 2}")


_BOMB = "".join(
    f"  {name}: &{name} [{', '.join([prev] * 9)}]\n"
    for prev, name in zip(
        ["'lol'", *[f"*l{i}" for i in range(8)]], [f"l{i}" for i in range(9)], strict=True
    )
)


def test_an_alias_bomb_under_fixes_is_one_line_within_a_memory_limit(tmp_path):
    budget = tmp_path / "bomb.yaml"
    budget.write_text(BUDGET + "fixes:\n" + _BOMB)
    # 9 levels of 9 aliases: 387 million strings if expanded. Run under a 1 GiB
    # address-space limit, so an expansion fails the test instead of the machine.
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from tailbudget.cli import main\n"
        f"sys.argv = ['tailbudget', 'plan', {str(budget)!r}]\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "expands to more than 100,000 nodes" in lines[0]


def test_replay_refuses_tiny_periods_and_infinite_baselines_and_stays_bounded(log_csv, tmp_path):
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(BUDGET + "policy: {window: 1s, evaluate_every: 1ms}\n")
    _one_line_error(
        runner.invoke(app, ["replay", str(log_csv), "--budget", str(tiny)]),
        "evaluate_every must be at least 0.1s",
    )
    _one_line_error(
        runner.invoke(app, ["replay", str(log_csv), "--baseline-p99", "inf"]),
        "--baseline-p99 must be a positive, finite number",
    )
    fine = tmp_path / "fine.yaml"
    fine.write_text(BUDGET + "policy: {window: 1s, evaluate_every: 100ms, min_samples: 2}\n")
    result = runner.invoke(app, ["replay", str(log_csv), "--budget", str(fine), "--format", "json"])
    assert result.exit_code == 0, result.output[-500:]
    out = json.loads(result.output)  # strict JSON: no bare Infinity
    assert out["evaluations"] >= 59_000 and len(out["timeline"]) <= 5_000
    assert any("timeline: every" in note for note in out["notes"])
    assert len(result.output) < 10_000_000


def _small_log(path: Path, total: np.ndarray, db: np.ndarray) -> Path:
    rows = [
        f"{1_700_000_000 + i},{float(t)!r},{float(d)!r},{float(t - d)!r},0"
        for i, (t, d) in enumerate(zip(total, db, strict=True))
    ]
    path.write_text("ts,total_ms,db_ms,llm_ms,error\n" + "\n".join(rows) + "\n")
    return path


def test_an_empty_fast_group_is_reported_as_empty_not_as_zero(tmp_path):
    log = _small_log(tmp_path / "same.csv", np.full(2000, 100.0), np.full(2000, 40.0))
    report = json.loads(_audit(log, "--slo", "p99=900").output)
    assert report["tail"]["driver"] is None and report["tail"]["deltas"] == []
    assert report["tail"]["n_fast"] == 0
    assert any("no tail driver" in r for r in report["refusals"])


def test_a_one_row_log_gates_only_on_what_it_proves(tmp_path):
    # One request over a p99 target is a proven breach (p = 0.01 under "at most 1% over"),
    # and gates; one request under it settles nothing, and never gates.
    over = _small_log(tmp_path / "one.csv", np.array([5000.0]), np.array([200.0]))
    args = ["--slo", "p99=900", "--format", "json", "--fail-on-breach"]
    result = runner.invoke(app, ["audit", str(over), *args])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["snapshot"]["verdict"] == {"p99": "breach"}
    under = _small_log(tmp_path / "under.csv", np.array([500.0]), np.array([200.0]))
    result = runner.invoke(app, ["audit", str(under), *args])
    assert result.exit_code == 0, result.output  # inconclusive never gates
    assert json.loads(result.stdout)["snapshot"]["verdict"] == {"p99": "inconclusive"}


def test_a_log_in_seconds_gets_a_warning_and_the_unit_hint(tmp_path):
    rng = np.random.default_rng(3)
    db = rng.lognormal(-3, 0.5, 2000)
    total = db + rng.lognormal(-1, 0.5, 2000)
    log = _small_log(tmp_path / "secs.csv", total, db)
    out = tmp_path / "r.json"
    result = runner.invoke(
        app, ["audit", str(log), "--slo", "p99=900", "--format", "json", "-o", str(out)]
    )
    assert result.exit_code == 0
    assert "look like seconds" in result.output and "--unit s" in result.output
    notes = json.loads(out.read_text())["provenance"]["notes"]
    assert any("unit s" in n for n in notes)
    again = runner.invoke(
        app, ["audit", str(log), "--slo", "p99=900", "--unit", "s", "--format", "json"]
    )
    assert again.exit_code == 0 and "look like seconds" not in again.output


def test_a_log_of_errors_gets_no_latency_fix(tmp_path):
    rng = np.random.default_rng(4)
    db = rng.lognormal(3, 0.5, 2000)
    total = db + rng.lognormal(6, 0.5, 2000)
    log = _small_log(tmp_path / "errs.csv", total, db)
    text = log.read_text().replace(",0\n", ",1\n")
    log.write_text(text)
    report = json.loads(_audit(log, "--slo", "p99=900").output)
    assert report["ranking"] == [] and report["hypotheses"] == []
    assert any("2,000 of 2,000 requests are errors" in r for r in report["refusals"])
    assert report["recommendation"]["choice"] == "none"
    assert "fix the errors" in report["recommendation"]["text"]
