"""Realistic audit and replay reports for the HTML renderer tests: the real audit and
the real replay run over a generated request log (numpy), never typed in by hand.

The log: a RAG service (embedding, retrieval || keyword_search, llm), whose llm
time grows with seq_len, whose /search route has a slow retrieval tail, and
which was redeployed half-way through (the first minutes after are slow).
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tailbudget.audit import AuditConfig, AuditReport, run_audit
from tailbudget.budget.policy import parse_policy
from tailbudget.budget.slo import SLO as SLOModel
from tailbudget.control.logsource import load_replay_log
from tailbudget.control.replay import Baseline, replay
from tailbudget.control.replay_record import ReplayReport
from tailbudget.logs import ReadOptions, read_log

START = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
SLO = {"p50": 1300.0, "p95": 2800.0, "p99": 5200.0}
BUDGETS = {
    "embedding": {"p50": 100.0, "p95": 200.0, "p99": 400.0},
    "retrieval": {"p50": 200.0, "p95": 400.0, "p99": 800.0},
    "keyword_search": {"p50": 50.0, "p95": 120.0, "p99": 300.0},
    "llm": {"p50": 1000.0, "p95": 2000.0, "p99": 4000.0},
}
DEPLOY_MIN = 30.0
COLD_MIN = 5.0
PCTS = {"p50": 50, "p95": 95, "p99": 99}


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def make_log(n: int = 6000, seed: int = 7, minutes: float = 60.0) -> dict[str, np.ndarray]:
    """A per-request log as numpy columns (t_s seconds since START, stages in ms)."""
    rng = np.random.default_rng(seed)
    t_s = np.sort(rng.uniform(0, minutes * 60, n))
    route = rng.choice(np.array(["/chat", "/search", "/summarize"]), n, p=[0.6, 0.25, 0.15])
    variant = rng.choice(np.array(["a", "b"]), n, p=[0.7, 0.3])
    seq_len = rng.gamma(2.0, 400.0, n).round()
    emb = rng.lognormal(np.log(60), 0.35, n)
    retr = rng.lognormal(np.log(150), 0.4, n)
    slow_search = (route == "/search") & (rng.random(n) < 0.12)
    retr = retr + slow_search * rng.lognormal(np.log(1800), 0.5, n)
    kw = rng.lognormal(np.log(40), 0.4, n)
    llm = 250 + 0.9 * seq_len + rng.lognormal(np.log(200), 0.5, n)
    since_deploy = t_s / 60 - DEPLOY_MIN
    cold = (since_deploy >= 0) & (since_deploy < COLD_MIN)
    llm = llm + cold * rng.lognormal(np.log(2500), 0.3, n)
    total = emb + np.maximum(retr, kw) + llm + rng.lognormal(np.log(40), 0.3, n)
    error = rng.random(n) < np.where(cold, 0.03, 0.004)
    return {
        "t_s": t_s,
        "route": route,
        "model_variant": variant,
        "seq_len": seq_len,
        "embedding": emb,
        "retrieval": retr,
        "keyword_search": kw,
        "llm": llm,
        "total": total,
        "error": error,
    }


OPTIONS = ReadOptions(
    timestamp="ts",
    total="total_ms",
    error="error",
    shape=("seq_len",),
    cohorts=("route", "model_variant"),
)


def as_table(log: dict[str, np.ndarray]) -> pa.Table:
    """`log` as an Arrow table with a UTC timestamp and `<stage>_ms` columns."""
    ts = [START + timedelta(seconds=float(s)) for s in log["t_s"]]
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
            "route": log["route"],
            "model_variant": log["model_variant"],
            "seq_len": log["seq_len"],
            **{f"{s}_ms": log[s] for s in BUDGETS},
            "total_ms": log["total"],
            "error": log["error"],
        }
    )


def write_parquet(log: dict[str, np.ndarray], path: Path, *, only_total: bool = False) -> Path:
    """`log` as a Parquet file (with `only_total`, the end-to-end latency alone)."""
    table = as_table(log)
    pq.write_table(table.select(["total_ms"]) if only_total else table, path)
    return path


def make_audit(
    log: dict[str, np.ndarray] | None = None, *, only_total: bool = False
) -> AuditReport:
    """The audit of `log` against SLO and the stage budgets, with the deploy as an event
    and the same service an hour earlier (another seed) as the baseline."""
    log = log or make_log()
    with tempfile.TemporaryDirectory() as tmp:
        options = ReadOptions(total="total_ms") if only_total else OPTIONS
        path = write_parquet(log, Path(tmp) / "requests.parquet", only_total=only_total)
        before = write_parquet(make_log(seed=11), Path(tmp) / "before.parquet")
        config = AuditConfig.of_e2e(
            dict(SLO),
            gated=("p95", "p99"),
            events=() if only_total else ((START + timedelta(minutes=DEPLOY_MIN), "deploy"),),
            cold_window_min=COLD_MIN,
            stage_budgets={k: dict(v) for k, v in BUDGETS.items()},
            service="rag-chat",
            baseline=None if only_total else read_log(str(before), options),
        )
        return run_audit(read_log(str(path), options), config)


def make_replay(log: dict[str, np.ndarray] | None = None) -> ReplayReport:
    """The default policy (scaled to SLO) replayed over `log`, its first 10 min the baseline."""
    log = log or make_log()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_parquet(log, Path(tmp) / "requests.parquet")
        data = load_replay_log(path, timestamp="ts", total="total_ms", error="error")
    policy = parse_policy("default", SLOModel(**SLO))
    base = Baseline(float(np.percentile(log["total"][log["t_s"] < 600], 99)), "first 10 min")
    return replay(data, policy, baseline=base, service="rag-chat")
