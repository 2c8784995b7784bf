"""`tailbudget audit` on files: formats, exit codes, bad input, real recorded logs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from tailbudget.audit.weak import MIN_SLOW_REQUESTS
from tailbudget.cli import app
from tailbudget.demo import planted as synth
from tailbudget.report.audit_md import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
# The repo's parent holds shared/ (CI); a git worktree sits one folder deeper.
DATA = next(
    (
        p
        for p in (ROOT / ".." / "shared" / "data", ROOT / ".." / ".." / "shared" / "data")
        if p.is_dir()
    ),
    ROOT / ".." / "shared" / "data",
)
runner = CliRunner()
SLO = "p50=900,p95=1100,p99=1500"


def write_log(tmp: Path, df: pd.DataFrame, name: str = "log.csv") -> Path:
    df = df.copy()
    df["total_ms"] = df["embedding_ms"] + df["retrieval_ms"] + df["llm_ms"] + df.pop("overhead")
    path = tmp / name
    if name.endswith(".parquet"):
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def healthy_csv(tmp_path_factory) -> Path:
    return write_log(tmp_path_factory.mktemp("h"), synth.base(n=5000))


@pytest.fixture(scope="module")
def cold_parquet(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("c")
    df = synth.base(n=8000, seed=3)
    ts = df["ts"]
    for when, _ in synth.EVENTS:
        w = pd.Timestamp(when.replace(tzinfo=None))
        cold = (ts >= w) & (ts < w + pd.Timedelta(minutes=5))
        df.loc[cold, "llm_ms"] *= 3.0
    events = tmp / "events.csv"
    events.write_text(
        "timestamp,event\n" + "".join(f"{w.isoformat()},scale_up\n" for w, _ in synth.EVENTS)
    )
    return write_log(tmp, df, "log.parquet"), events


def run(*args: str):
    return runner.invoke(app, ["audit", *args])


def test_markdown_has_the_ten_sections_in_order(healthy_csv: Path) -> None:
    res = run(str(healthy_csv), "--slo", SLO, "--shape", "seq_len", "--cohort", "route")
    assert res.exit_code == 0, res.output
    heads = [ln[3:] for ln in res.output.splitlines() if ln.startswith("## ")]
    assert heads == list(SECTIONS)
    assert "**none**" in res.output


def test_json_contract_keys(cold_parquet, tmp_path: Path) -> None:
    log, events = cold_parquet
    out = tmp_path / "r.json"
    res = run(
        str(log),
        "--slo",
        SLO,
        "--events",
        str(events),
        "--format",
        "json",
        "-o",
        str(out),
        "--shape",
        "seq_len",
        "--cohort",
        "route",
    )
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    for key in (
        "rows",
        "slo",
        "snapshot",
        "stages",
        "tail",
        "shape",
        "cohorts",
        "cold_start",
        "hypotheses",
        "ranking",
        "refusals",
        "recommendation",
        "provenance",
        "cdf",
        "overlap",
        "goodput",
        "baseline",
    ):
        assert key in r
    assert set(r["rows"]) >= {"total", "used", "rejected", "rejected_reasons"}
    assert set(r["snapshot"]) >= {
        "p50",
        "p95",
        "p99",
        "max",
        "mean",
        "verdict",
        "breach_rate_per_min",
    }
    assert {s["name"] for s in r["stages"]} == {"embedding", "retrieval", "llm", "unattributed"}
    assert set(r["tail"]) >= {"driver", "deltas"}
    assert set(r["cold_start"]) >= {
        "window_min",
        "unfiltered_p99",
        "filtered_p99",
        "verdict",
        "timeline",
        "events",
    }
    assert r["cold_start"]["verdict"] == "cold_start"
    assert [h["kind"] for h in r["hypotheses"]] == ["cold_start"]
    assert set(r["ranking"][0]) >= {
        "fix",
        "stage",
        "p99_saved_ms",
        "hours",
        "risk",
        "reversible",
        "score",
    }
    assert r["recommendation"]["choice"] == "fix_tail"
    qs = [p["q"] for p in r["cdf"]]
    assert qs == sorted(qs) and qs[-1] == 1.0 and len(qs) > 150


def test_fail_on_breach_exits_1_only_on_gated_breach(cold_parquet, healthy_csv: Path) -> None:
    log, _ = cold_parquet
    assert run(str(log), "--slo", SLO, "--fail-on-breach").exit_code == 1
    assert run(str(healthy_csv), "--slo", SLO, "--fail-on-breach").exit_code == 0
    # p50 passes here and is the only target given, so nothing gated breaches.
    assert run(str(log), "--slo", "p50=2000", "--fail-on-breach").exit_code == 0


def test_budget_file_gives_slo_and_gates(cold_parquet, tmp_path: Path) -> None:
    log, _ = cold_parquet
    budget = tmp_path / "b.yaml"
    budget.write_text(
        "environment: dev\nslo: {p50: 1000, p99: 1500}\npipeline:\n"
        "  - stage: llm\n    budget: {p99: 900}\nlog: {shape: [seq_len]}\n"
        "fixes: {prewarm_replicas: {hours: 2}}\n"
    )
    res = run(str(log), "--budget", str(budget), "--format", "json", "--fail-on-breach")
    assert res.exit_code == 0, res.output  # dev gates p50 only, and p50 passes
    r = json.loads(res.output)
    assert r["snapshot"]["verdict"]["p99"] == "breach"
    llm = next(s for s in r["stages"] if s["name"] == "llm")
    assert llm["budget"] == {"p99": 900.0}
    assert [s["covariate"] for s in r["shape"]] and r["shape"][0]["covariate"] == "seq_len"


def test_baseline_regression_interval(cold_parquet, healthy_csv: Path) -> None:
    log, _ = cold_parquet
    res = run(str(log), "--slo", SLO, "--baseline", str(healthy_csv), "--format", "json")
    assert res.exit_code == 0, res.output
    rows = {b["percentile"]: b for b in json.loads(res.output)["baseline"]}
    p99 = rows["p99"]
    assert p99["after"] > p99["before"] and p99["change"] > 0
    assert p99["ci_low"] <= p99["change"] <= p99["ci_high"]
    assert p99["ci_low"] > 0  # the planted regression is well outside noise


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "--slo"),
        (["--slo", SLO, "--workload", "batch"], "throughput"),
        (["--slo", "p99=abc"], "p99"),
        (["--slo", "p100=100"], "not a percentile"),
        (["--slo", "ttft.p95=-1"], "positive number of ms"),
        (["--slo", SLO, "--slow", "p80"], "--slow"),
        (["--slo", SLO, "--cold-window-min", "0"], "cold-window-min"),
    ],
)
def test_bad_options_exit_2_with_one_line(healthy_csv: Path, args, needle) -> None:
    res = run(str(healthy_csv), *args)
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


def test_bad_files_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    nolat = tmp_path / "nolat.csv"
    nolat.write_text("a,b\nx,y\n")
    for path in (empty, nolat, tmp_path / "missing.csv"):
        res = run(str(path), "--slo", SLO)
        assert res.exit_code == 2, res.output
        assert res.output.startswith("error: ") and "Traceback" not in res.output


def test_bad_events_file_exit_2(healthy_csv: Path, tmp_path: Path) -> None:
    bad = tmp_path / "ev.csv"
    bad.write_text("when,event\nyesterday,deploy\n")
    res = run(str(healthy_csv), "--slo", SLO, "--events", str(bad))
    assert res.exit_code == 2 and "timestamp" in res.output
    bad.write_text("timestamp,event\nyesterday,deploy\n")
    res = run(str(healthy_csv), "--slo", SLO, "--events", str(bad))
    assert res.exit_code == 2 and "yesterday" in res.output


def test_bad_rows_are_counted_and_the_audit_goes_on(tmp_path: Path) -> None:
    df = synth.base(n=2000)
    df["total_ms"] = (
        df["embedding_ms"] + df["retrieval_ms"] + df["llm_ms"] + df.pop("overhead")
    ).astype(object)
    df.loc[0:9, "total_ms"] = -5.0
    df.loc[10:14, "total_ms"] = float("nan")
    df.loc[15:17, "total_ms"] = "slow"
    path = tmp_path / "bad.csv"
    df.to_csv(path, index=False)
    res = run(str(path), "--slo", SLO, "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["rows"]
    assert rows["total"] == 2000 and rows["rejected"] == 18 and rows["used"] == 1982
    assert sum(rows["rejected_reasons"].values()) == 18
    assert json.loads(res.output)["snapshot"]["count"] == 1982


def test_html_format_renders_or_says_why(healthy_csv: Path) -> None:
    res = run(str(healthy_csv), "--slo", SLO, "--format", "html")
    try:
        import tailbudget.report.html  # noqa: F401
    except ImportError:
        assert res.exit_code == 2 and "--format md or json" in res.output
    else:
        assert res.exit_code == 0 and "<html" in res.output.lower()


DELAG_STAGES = (
    "CategoriesControllerGetcategory",
    "ItemsControllerFindfeaturesitemrandom",
    "ItemsControllerFinditemrandom",
    "ItemsControllerFinditemsrandombyidproduct",
    "ProductsControllerFindproduct",
    "ProductsControllerFindproductrandom",
    "GatewayGet",
)


@pytest.mark.skipif(not DATA.is_dir(), reason="shared/data is not next to the repo")
def test_real_delag_eshopper_nested_rpcs() -> None:
    stages = [a for s in DELAG_STAGES for a in ("--stage", s)]
    res = run(
        str(DATA / "delag_eshopper_000.csv"),
        "--total",
        "Latency",
        *stages,
        "--slo",
        "p95=450,p99=480",
        "--cohort",
        "anomaly",
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    assert r["rows"]["used"] > 9000
    # RPC calls nest: their sum exceeds the total in many requests, so no unattributed slice.
    assert r["overlap"]["nested"] and r["overlap"]["share"] > 0.3
    assert "unattributed" not in {s["name"] for s in r["stages"]}
    assert r["tail"]["driver"] == "GatewayGet"
    # The two injected anomalies carry the slow group, far above their traffic share.
    flagged = {c["value"] for c in r["cohorts"] if c["flag"]}
    assert flagged == {"1", "2"}
    # ... and show up as bimodal Products calls, which the ranking tackles.
    kinds = {(h["kind"], h["stage"]) for h in r["hypotheses"]}
    assert ("cache_miss", "ProductsControllerFindproduct") in kinds
    assert r["ranking"] and r["recommendation"]["choice"] == "fix_tail"


@pytest.mark.skipif(not DATA.is_dir(), reason="shared/data is not next to the repo")
def test_real_vllm_benchmark_decode_length_drives_the_tail() -> None:
    res = run(
        str(DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"),
        "--slo",
        "p99=15000",
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    assert r["provenance"]["format"] == "vllm" and r["rows"]["used"] == 200
    # total = ttft + decode exactly: no unattributed slice.
    assert [s["name"] for s in r["stages"]] == ["ttft", "decode"]
    assert r["tail"]["driver"] == "decode"
    fit = r["shape"][0]
    assert (fit["stage"], fit["covariate"]) == ("decode", "output_tokens") and fit["r2"] > 0.9
    assert fit["flag"] and fit["slope"] > 0
    assert [(h["kind"], h["stage"]) for h in r["hypotheses"]] == [("input_shape", "decode")]
    # 200 requests leave 8 in the slow group [p95, p99]: too few to rank fixes on.
    assert r["tail"]["n_slow"] < MIN_SLOW_REQUESTS and r["tail"]["weak"]
    assert all(h["weak"] for h in r["hypotheses"])
    assert r["ranking"] == [] and any("fixes not ranked" in x for x in r["refusals"])
    rec = r["recommendation"]
    assert rec["weak"] and rec["choice"] == "fix_tail"
    assert f"only {r['tail']['n_slow']} requests in the slow group" in rec["text"].lower()
    assert "input_shape" in rec["text"]


@pytest.mark.skipif(not DATA.is_dir(), reason="shared/data is not next to the repo")
def test_real_llmperf_run_meets_a_loose_slo() -> None:
    res = run(
        str(DATA / "llmperf_anyscale_70b.json"), "--slo", "p95=5000,p99=8000", "--format", "json"
    )
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    assert r["tail"]["driver"] == "decode"
    assert set(r["snapshot"]["verdict"].values()) == {"pass"}
    assert r["recommendation"]["choice"] == "none"


@pytest.fixture(scope="module")
def output_parquet(tmp_path_factory) -> Path:
    df = synth.output_length().table.execute()
    path = tmp_path_factory.mktemp("o") / "llm.parquet"
    df.to_parquet(path, index=False)
    return path


def test_output_length_fix_in_every_format(output_parquet: Path, tmp_path: Path) -> None:
    args = [str(output_parquet), "--slo", "p95=8000,p99=15000"]
    args += ["--shape", "input_tokens", "--shape", "output_tokens"]
    res = run(*args, "--format", "json")
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    assert [(f["fix"], f["stage"]) for f in r["ranking"]] == [("cap_output_tokens", "decode")]
    md = run(*args).output
    ranking = md[md.index("## Ranking") : md.index("## Recommendation")]
    assert "| cap_output_tokens | decode |" in ranking
    assert "- cap_output_tokens: output length capped at its p95 (max_tokens)" in ranking
    assert "max_tokens" in md[md.index("## Recommendation") :]
    assert "cap_input_size" not in md
    try:
        import tailbudget.report.html  # noqa: F401
    except ImportError:
        return
    html = run(*args, "--format", "html").output
    assert "cap_output_tokens" in html and "cap_input_size" not in html
    assert "max_tokens" in html


def test_budget_file_overrides_the_output_fix(output_parquet: Path, tmp_path: Path) -> None:
    budget = tmp_path / "b.yaml"
    head = "slo: {p95: 8000, p99: 15000}\npipeline:\n  - stage: decode\n    budget: {p99: 9000}\n"
    head += "log: {shape: [input_tokens, output_tokens]}\n"
    budget.write_text(head + "fixes: {cap_output_tokens: {hours: 1, risk: low}}\n")
    res = run(str(output_parquet), "--budget", str(budget), "--format", "json")
    assert res.exit_code == 0, res.output
    top = json.loads(res.output)["ranking"][0]
    assert (top["fix"], top["hours"], top["risk"]) == ("cap_output_tokens", 1, "low")
    assert top["score"] == pytest.approx(top["p99_saved_ms"])
    budget.write_text(head + "fixes: {cap_max_tokens: {hours: 1}}\n")
    res = run(str(output_parquet), "--budget", str(budget), "--format", "json")
    assert res.exit_code == 2 and "cap_output_tokens" in res.output
