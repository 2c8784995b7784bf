"""`tailbudget demo`: the generated log holds its planted causes and the audit finds them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tailbudget.cli import app
from tailbudget.demo import STEPS, run_demo
from tailbudget.demo.generate import make_table


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("demo")
    res = CliRunner().invoke(app, ["demo", "--out", str(out), "--rows", "60000"])
    assert res.exit_code == 0, res.output
    return out, res.output


def test_demo_writes_every_file_and_a_summary(demo_dir) -> None:
    out, output = demo_dir
    for name in (
        "rag_requests.parquet",
        "events.csv",
        "budget.yaml",
        "plan.md",
        "report.md",
        "report.json",
    ):
        assert (out / name).is_file(), name
    assert "recommendation: fix_tail" in output
    assert "plan: the stage budgets fit the SLO with headroom, on paper" in output
    assert pq.read_metadata(out / "rag_requests.parquet").num_rows == 60_000


def test_demo_audit_finds_the_planted_causes(demo_dir) -> None:
    out, _ = demo_dir
    r = json.loads((out / "report.json").read_text())
    found = {(h["kind"], h["stage"]) for h in r["hypotheses"]}
    assert found >= {
        ("cold_start", "llm"),
        ("input_shape", "llm"),
        ("cache_miss", "retrieval"),
        ("external_dependency", "rerank"),
    }
    assert r["snapshot"]["verdict"]["p99"] == "breach"
    # Other causes keep p99 over the SLO without the cold windows, but it drops clearly.
    cs = r["cold_start"]
    assert cs["filtered_p99"] < 0.9 * cs["unfiltered_p99"] and len(cs["events"]) == 6
    assert r["ranking"][0]["p99_saved_ms"] > 0
    cache = next(h for h in r["hypotheses"] if h["kind"] == "cache_miss")
    assert cache["figures"]["miss_share"] == pytest.approx(0.15, abs=0.03)
    # The budget's stage slices appear next to the measured percentiles.
    llm = next(s for s in r["stages"] if s["name"] == "llm")
    assert llm["budget"] == {"p50": 900.0, "p95": 2000.0, "p99": 2600.0}
    md = (out / "report.md").read_text()
    assert md.index("## Provenance") < md.index("## Ranking") < md.index("## Recommendation")


def test_generator_is_deterministic_and_sized() -> None:
    a, ev_a = make_table(5000, seed=3)
    b, ev_b = make_table(5000, seed=3)
    assert a.num_rows == 5000 and a.equals(b) and ev_a == ev_b and ev_a


def test_steps_are_extensible(tmp_path: Path) -> None:
    seen: list[str] = []

    def step_extra(state) -> None:
        """Extra step."""
        seen.append(state.data.log.name)
        state.summary.append("extra ran")

    state = run_demo(tmp_path, rows=5000, steps=[STEPS[0], step_extra])
    assert seen == ["rag_requests.parquet"] and state.summary[-1] == "extra ran"


def test_demo_rejects_bad_rows_option(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path), "--rows", "10"])
    assert res.exit_code == 2 and "--rows" in res.output


def test_demo_simulates_the_policies_side_by_side(demo_dir) -> None:
    out, output = demo_dir
    text = (out / "simulate.md").read_text()
    for name in ("model", "budget", "hpa:concurrency=8", "fixed:2", "floor (hindsight)"):
        assert f"| {name} |" in text, name
    line = next(ln for ln in output.splitlines() if "simulate (" in ln)
    assert "hindsight floor" in line and "model " in line and "budget " in line
    assert (out / "simulate.html").is_file()
