"""Tracebacks that used to escape: vLLM files whose `itls` are flat or hold strings, `-o`
names too long for the file system, `demo --out` under a file or an unwritable tree,
a recursive SQL `--query`. Each is one `error:` line and exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget.cli import app
from tests.cli._expect import one_line_error

runner = CliRunner()
GRID = Path(__file__).resolve().parents[3] / "shared" / "data" / "vllm_grid"
if not GRID.is_dir():
    GRID = Path("/work/shared/data/vllm_grid")

BUDGET = """\
service: svc
slo: {p50: 300, p95: 800, p99: 1500}
pipeline:
  - stage: db
    budget: {p50: 50, p95: 150, p99: 300}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("paths")
    rng = np.random.default_rng(3)
    rows = [
        f"{1_700_000_000 + i},{v:.3f},{v / 3:.3f},0"
        for i, v in enumerate(rng.lognormal(5, 0.5, 300))
    ]
    (d / "log.csv").write_text("ts,total_ms,db_ms,error\n" + "\n".join(rows) + "\n")
    (d / "b.yaml").write_text(BUDGET)
    out = {"dir": d, "log": d / "log.csv", "budget": d / "b.yaml"}
    if GRID.is_dir():
        base = json.loads(next(GRID.glob("*.json")).read_text())
        flat = {**base, "itls": [0.01] * len(base["itls"])}
        words = {**base, "itls": [["a", "b"]] * len(base["itls"])}
        (d / "flat.json").write_text(json.dumps(flat))
        (d / "words.json").write_text(json.dumps(words))
        out |= {"flat": d / "flat.json", "words": d / "words.json"}
    return out


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("flat", "vLLM field 'itls' holds 0.01 for request 0; each request's inter-token gaps"),
        ("words", "vLLM field 'itls' holds 'a' among request 0's gaps"),
    ],
)
@pytest.mark.parametrize("command", ["audit", "simulate"])
def test_vllm_gaps_that_are_not_lists_of_numbers_areone_line_error(files, kind, needle, command):
    if kind not in files:
        pytest.skip("shared data not present")
    slo = "ttft.p95=500,itl.p99=100" if command == "audit" else "ttft.p95=500"
    one_line_error(runner.invoke(app, [command, str(files[kind]), "--slo", slo]), needle)


def _every_output_command(files: dict[str, Path], out: str) -> list[list[str]]:
    log, budget = str(files["log"]), str(files["budget"])
    return [
        ["init", "-o", out],
        ["init", "--from", log, "-o", out],
        ["audit", log, "--slo", "p99=900", "-o", out],
        ["plan", budget, "-o", out],
        ["rebudget", budget, log, "-o", out],
        ["replay", log, "-o", out],
        ["export", budget, "--to", "keda", "-o", out],
        ["simulate", log, "--slo", "p95=800", "--duration", "2m", "-o", out],
    ]


def test_an_output_name_too_long_for_the_file_system_isone_line_error(files):
    out = str(files["dir"] / ("x" * 300 + ".yaml"))
    for args in _every_output_command(files, out):
        line = one_line_error(runner.invoke(app, args), "File name too long")
        assert len(line) < 400, line  # the name is shown by its ends


def test_an_output_under_a_file_isone_line_error(files):
    a_file = files["dir"] / "taken"
    a_file.write_text("")
    for args in _every_output_command(files, str(a_file / "out.yaml")):
        one_line_error(runner.invoke(app, args), str(a_file / "out.yaml"))


def test_demo_out_under_a_file_too_long_or_unwritable_isone_line_error(tmp_path):
    a_file = tmp_path / "taken"
    a_file.write_text("")
    demo = ["demo", "--rows", "1000", "--out"]
    one_line_error(runner.invoke(app, [*demo, str(a_file / "sub")]), "cannot write there")
    one_line_error(runner.invoke(app, [*demo, str(tmp_path / ("d" * 300))]), "File name too long")
    if os.geteuid() == 0:  # root writes through permission bits: /proc takes no folders
        unwritable = Path("/proc/tailbudget-demo")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        unwritable = locked / "demo"
    one_line_error(runner.invoke(app, [*demo, str(unwritable)]), "cannot write there")


def test_a_recursive_query_stops_at_its_time_limit():
    query = (
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) "
        "SELECT CAST(n AS DOUBLE) AS total_ms FROM t"
    )
    args = ["audit", "--query", query, "--slo", "p99=900", "--query-timeout", "2s"]
    one_line_error(
        runner.invoke(app, args),
        "--query: still running after its time limit of 2 s",
        "recursive CTE needs a stop condition",
        "--query-timeout",
    )
    fine = ["audit", "--query", "SELECT 100.0 + range AS total_ms FROM range(500)", "--slo"]
    assert runner.invoke(app, [*fine, "p99=900", "--format", "json"]).exit_code == 0


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p.mkdir(), "a folder, not a budget file"),
        (lambda p: p.write_bytes(bytes(range(256)) * 4), "not a text file"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "export", "audit"])
def test_a_budget_that_is_a_folder_or_binary_says_so(files, tmp_path, make, needle, command):
    # It read "cannot read budget file (IsADirectoryError: [Errno 21] Is a directory: ...)".
    budget = tmp_path / "budget.yaml"
    make(budget)
    args = {
        "plan": ["plan", str(budget)],
        "export": ["export", str(budget), "--to", "keda"],
        "audit": ["audit", str(files["log"]), "--budget", str(budget)],
    }[command]
    line = one_line_error(runner.invoke(app, args), "budget.yaml", needle, "tailbudget init")
    assert "Errno" not in line and "Error:" not in line


@pytest.mark.parametrize("name", ["junk.csv", "junk.parquet", "junk.json"])
def test_binary_junk_under_a_log_name_says_to_check_the_file(tmp_path, name):
    # It gave the engine's words alone ("Error when sniffing file ..."), no fix.
    path = tmp_path / name
    path.write_bytes(bytes(range(256)) * 12)
    result = runner.invoke(app, ["audit", str(path), "--slo", "p99=500"])
    line = one_line_error(result, name, "check that the file is what its name says")
    assert ".;" not in line
