"""simulate and capacity with `--class-by COLUMN`: the class column named on the command
line (as audit's and init's), arrivals carrying a class (a CSV column, a Mooncake field,
or a stated share per class), and a real vLLM run split into prompt-length terciles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tailbudget.demo.tiers import tiered
from tests._data import DATA
from tests.cli._expect import one_line_error

runner = CliRunner()
SLO = "p99=1500,premium:p95=800,standard:p99=1500,batch:p99=6000"


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiers") / "tiers.parquet"
    tiered(n=3000, seed=5).to_parquet(path, index=False)
    return path


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _classes(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["classes"]}


def test_class_by_names_the_column_without_a_budget(log) -> None:
    args = ["simulate", str(log), "--slo", SLO, "--class-by", "tier", "--policy", "fixed:40"]
    doc = _json(runner.invoke(app, [*args, "-f", "json"]))
    got = _classes(doc)
    assert list(got) == ["premium", "standard", "batch"]
    assert all(c["listed"] for c in got.values())
    (premium,) = got["premium"]["objectives"]
    assert premium["verdict"] == "breach" and premium["measured_ms"] > 800
    # The Python API says the same.
    api = json.loads(tb.simulate(log, SLO, class_by="tier", policy=["fixed:40"]).to_json())
    assert api["classes"] == doc["classes"]


def test_class_by_alone_shows_each_value_ungated(log) -> None:
    # No class objectives: every tier is shown against the service-wide objectives,
    # ungated (as the audit shows unlisted values), and never named as a breach.
    doc = json.loads(tb.simulate(log, "p95=900", class_by="tier", policy=["fixed:40"]).to_json())
    got = _classes(doc)
    assert set(got) == {"premium", "standard", "batch"}
    assert not any(c["listed"] for c in got.values())
    assert all(not o["gated"] for c in got.values() for o in c["objectives"])
    assert sum(c["requests"] for c in got.values()) == doc["requests"]["arrived"]
    md = tb.simulate(log, "p95=900", class_by="tier", policy=["fixed:40"]).to_markdown()
    assert "premium (not listed: service-wide, ungated)" in md
    assert "but class" not in md.split("\n\n", 2)[1]


def test_a_missing_class_column_is_refused(log) -> None:
    for cmd in ("simulate", "capacity"):
        result = runner.invoke(app, [cmd, str(log), "--slo", SLO, "--class-by", "nope"])
        one_line_error(result, "--class-by", "'nope' not found", "tier")


def _csv_trace(path: Path, n: int = 1200) -> list[str]:
    tiers = ["premium" if i % 5 == 0 else "batch" for i in range(n)]
    rows = "".join(f"{1_700_000_000 + i * 0.5:.1f},{t}\n" for i, t in enumerate(tiers))
    path.write_text("ts,tier\n" + rows)
    return tiers


def test_a_planted_arrival_file_through_simulate_and_capacity(log, tmp_path) -> None:
    trace = tmp_path / "arrivals.csv"
    _csv_trace(trace)
    base = ["--slo", SLO, "--class-by", "tier", "--arrivals", str(trace), "-f", "json"]
    doc = _json(runner.invoke(app, ["simulate", str(log), *base, "--policy", "fixed:40"]))
    assert "each arrival's class is the arrival trace's tier value" in " ".join(doc["notes"])
    assert {n: c["requests"] for n, c in _classes(doc).items()} == {
        "premium": 240,
        "standard": 0,
        "batch": 960,
    }
    # capacity draws the same classes: the count meets batch, premium's reranker is never met.
    cap = _json(runner.invoke(app, ["capacity", str(log), *base, "--load", "1"]))
    (point,) = cap["curve"]
    assert {c["name"]: c["requests"] for c in point["classes"]}["premium"] == 240
    assert point["replicas"] is None and point["set_by"] == "premium"
    # premium relaxed: every class is met, and the count is named by a class or the service.
    relaxed = SLO.replace("premium:p95=800", "premium:p95=3000")
    args = ["capacity", str(log), *base, "--load", "1"]
    cap = _json(runner.invoke(app, [*args[:3], relaxed, *args[4:]]))
    (point,) = cap["curve"]
    assert point["replicas"] is not None and point["set_by"] in {"service", "premium", "batch"}


def test_a_mooncake_trace_carries_a_class_field(log, tmp_path) -> None:
    trace = tmp_path / "arrivals.jsonl"
    lines = [
        {"timestamp": i * 500, "input_length": 100, "output_length": 10, "tier": t}
        for i, t in enumerate(["premium", "standard", "standard", "batch"] * 150)
    ]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rep = tb.simulate(log, SLO, class_by="tier", arrivals=str(trace), policy=["fixed:40"])
    got = {c["name"]: c["requests"] for c in json.loads(rep.to_json())["classes"]}
    assert got == {"premium": 150, "standard": 300, "batch": 150}


def test_a_stated_share_per_class(log) -> None:
    rep = tb.simulate(
        log, SLO, class_by="tier", arrivals="poisson:4", duration="30m", policy=["fixed:40"],
        class_mix="premium=0.5,standard=0.25,batch=0.25",
    )  # fmt: skip
    doc = json.loads(rep.to_json())
    n = doc["requests"]["arrived"]
    got = {c["name"]: c["requests"] / n for c in doc["classes"]}
    assert abs(got["premium"] - 0.5) < 0.03 and abs(got["batch"] - 0.25) < 0.03
    assert any(
        n.startswith("each arrival's class is drawn at the stated shares (premium 50")
        for n in doc["notes"]
    )
    # Half the arrivals premium: the shed share is still the lowest-priority class's.
    assert _classes(doc)["premium"]["objectives"][0]["verdict"] == "breach"


@pytest.mark.parametrize(
    ("mix", "needles"),
    [
        ("premium=0.5", ("--class-mix", "add up to 1", "0.5")),
        ("premium=2,batch=-1", ("--class-mix", "from 0 to 1")),
        ("gold=1", ("--class-mix", "'gold' has no request")),
        ("premium", ("--class-mix", "CLASS=SHARE")),
    ],
)
def test_a_bad_class_mix_is_one_line(log, mix, needles) -> None:
    args = ["simulate", str(log), "--slo", SLO, "--class-by", "tier", "--class-mix", mix]
    one_line_error(runner.invoke(app, [*args, "--arrivals", "poisson:1"]), *needles)


def test_a_class_mix_needs_the_class_column(log, tmp_path) -> None:
    result = runner.invoke(app, ["simulate", str(log), "--slo", "p99=1500", "--class-mix", "a=1"])
    one_line_error(result, "--class-mix", "class_by")
    trace = tmp_path / "arrivals.csv"
    _csv_trace(trace, 100)
    args = ["simulate", str(log), "--slo", SLO, "--class-by", "tier", "--arrivals", str(trace)]
    one_line_error(runner.invoke(app, [*args, "--class-mix", "batch=1"]), "--class-mix", "not both")


def test_real_vllm_terciles_through_simulate_class_by(tmp_path) -> None:
    # A natural class on a real file: the qps-4 run's prompt-length terciles. Each drawn
    # request keeps its tercile, so with replicas to spare each tercile's simulated TTFT
    # p95 is its own requests' logged p95 (within draw noise), and the longest tercile,
    # whose prompts take longest to prefill, is the one over 150 ms.
    path = DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_04.json"
    df = tb.read(path).to_pandas()
    df["length"] = pd.qcut(df.input_tokens, 3, labels=["short", "medium", "long"]).astype(str)
    log = tmp_path / "terciles.parquet"
    df.to_parquet(log, index=False)
    want = {n: float(np.percentile(g.total_ms, 95)) for n, g in df.groupby("length")}
    slo = "p95=100000," + ",".join(f"{n}:p95=100000" for n in want)
    args = ["simulate", str(log), "--slo", slo, "--class-by", "length", "--policy", "fixed:200"]
    doc = _json(
        runner.invoke(app, [*args, "--arrivals", "poisson:2", "--duration", "2h", "-f", "json"])
    )
    for name, c in _classes(doc).items():
        (o,) = c["objectives"]
        assert abs(o["measured_ms"] / want[name] - 1) < 0.03, (name, o, want)


def _table_with(page, header: str) -> list[list[str]]:
    return next(t for t in page.tables if t and header in t[0] and "gated" in t[0])


def test_the_simulate_html_has_a_class_table(log) -> None:
    from tests.report.html_probe import parse

    rep = tb.simulate(log, SLO, class_by="tier", policy=["fixed:40"])
    page = parse(rep.to_html())
    assert "classes" in page.sections
    rows = _table_with(page, "policy")
    head = rows[0]
    premium = next(r for r in rows[1:] if r[1] == "premium")
    got = dict(zip(head, premium, strict=True))
    want = next(c for c in rep.runs[0].classes or [] if c.name == "premium").objectives[0]
    assert got["verdict"] == "breach" and got["objective"] == "e2e.p95"
    assert got["minutes in breach"] == str(want.minutes_in_breach) and want.minutes_in_breach > 0
    assert got["attainment"].endswith("%")
    assert "class premium breaches e2e.p95" in rep.to_html()


def test_the_capacity_html_names_the_class_that_sets_the_count(log) -> None:
    from tests.report.html_probe import parse

    html = tb.capacity(log, SLO, class_by="tier", load="1").to_html()
    page = parse(html)
    assert "classes" in page.sections
    rows = _table_with(page, "load")
    assert {r[2] for r in rows[1:] if r[2]} == {"premium", "standard", "batch"}
    assert "1x: class premium is furthest over target" in html


def test_without_classes_the_pages_have_no_class_section(tmp_path) -> None:
    from tests.report.html_probe import parse

    path = tmp_path / "plain.parquet"
    tiered(n=2000, seed=5).drop(columns=["tier"]).to_parquet(path, index=False)
    rep = tb.simulate(path, "p99=1500", policy=["fixed:40"])
    assert "classes" not in parse(rep.to_html()).sections


def test_scale_before_breach_reads_the_classes(log) -> None:
    # standard's p99 is tightened to just over what it measures: the service-wide p99
    # (3,000 ms) is far from its target, so the class's objective is the one that
    # reaches 90% of its target first, and names the load.
    standard = tiered(n=3000, seed=5).query("tier == 'standard'").total_ms
    tight = round(float(np.percentile(standard, 99)) * 1.2)
    slo = f"p99=3000,premium:p95=3000,standard:p99={tight},batch:p99=6000"
    cap = json.loads(tb.capacity(log, slo, class_by="tier", load="1").to_json())
    sbb = cap["scale_before_breach"]
    assert sbb["objective"] == "standard:e2e.p99", sbb
    # At that load, on that many replicas, standard's own p99 is at 90% of its target.
    n, load = sbb["replicas"], sbb["load"]
    rep = tb.simulate(log, slo, class_by="tier", policy=[f"fixed:{n}"], load=load)
    got = next(c for c in rep.runs[0].classes or [] if c.name == "standard").objectives[0]
    assert got.measured_ms is not None and 0.85 < got.measured_ms / tight < 1.0
    plain = json.loads(tb.capacity(log, "p99=3000", load="1").to_json())["scale_before_breach"]
    assert plain["objective"] == "e2e.p99"


def test_audit_and_simulate_give_each_class_one_verdict_on_a_real_run() -> None:
    # The qps-4 run split into prompt-length terciles: their medians are far apart (about
    # 1.4, 10 and 12.7 s: short prompts carry long answers here). With replicas to spare
    # the model reproduces each tercile (each drawn request keeps its class), so the
    # simulated verdict of each class's own p50 objective is the audit's on the log.
    path = DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_04.json"
    df = tb.read(path).to_pandas()
    df["length"] = pd.qcut(df.input_tokens, 3, labels=["short", "medium", "long"]).astype(str)
    slo = "p95=100000," + ",".join(f"{n}:p50=5000" for n in ("short", "medium", "long"))
    audit = {
        c["name"]: c for c in json.loads(tb.audit(df, slo, class_by="length").to_json())["classes"]
    }
    rep = tb.simulate(
        df, slo, class_by="length", policy=["fixed:200"], arrivals="poisson:2", duration="2h"
    )
    verdicts = {}
    for c in json.loads(rep.to_json())["classes"]:
        (sim,) = c["objectives"]
        (log,) = audit[c["name"]]["objectives"]
        assert sim["verdict"] == log["verdict"], (c["name"], sim, log)
        # Within 10%: a tercile's median lies between two of its 67 logged requests, and
        # its neighbours stand a few hundred ms apart.
        assert abs(sim["measured_ms"] / log["measured_ms"] - 1) < 0.1, (c["name"], sim, log)
        verdicts[c["name"]] = sim["verdict"]
    assert verdicts == {"short": "breach", "medium": "breach", "long": "pass"}
