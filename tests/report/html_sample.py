"""Realistic audit and replay dicts for the HTML renderer tests, computed from a
generated request log (numpy), never typed in by hand.

The log: a RAG service (embedding, retrieval || keyword_search, llm), whose llm
time grows with seq_len, whose /search route has a slow retrieval tail, and
which was redeployed half-way through (the first minutes after are slow).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

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


def _pcts(x: np.ndarray) -> dict[str, float]:
    return {k: float(np.percentile(x, q)) for k, q in PCTS.items()}


def _shape(stage: str, x: np.ndarray, y: np.ndarray, cov: str) -> dict[str, Any]:
    slope, icpt = np.polyfit(x, y, 1)
    r2 = 1 - np.sum((y - (icpt + slope * x)) ** 2) / np.sum((y - y.mean()) ** 2)
    edges = np.unique(np.quantile(x, np.linspace(0, 1, 11)))
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
    profile = []
    for b in range(len(edges) - 1):
        m = idx == b
        if m.sum():
            profile.append(
                {
                    "x": float(x[m].mean()),
                    "n": int(m.sum()),
                    "mean_ms": float(y[m].mean()),
                    "p50_ms": float(np.percentile(y[m], 50)),
                    "p95_ms": float(np.percentile(y[m], 95)),
                }
            )
    return {
        "stage": stage,
        "covariate": cov,
        "r2": float(r2),
        "slope": float(slope),
        "intercept": float(icpt),
        "flag": "drives latency" if r2 > 0.3 else None,
        "profile": profile,
    }


def make_audit(log: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """An audit report dict (DESIGN.md contract + BRIEF extensions) computed from `log`."""
    log = log or make_log()
    raw_total = log["total"].copy()
    # A real log has bad rows: mark some as missing or negative and count them as rejected.
    raw_total[::997] = np.nan
    raw_total[5::1201] = -1.0
    missing, negative = int(np.isnan(raw_total).sum()), int((raw_total < 0).sum())
    ok = np.isfinite(raw_total) & (raw_total >= 0)
    log = {k: v[ok] for k, v in log.items()}
    total = log["total"]
    snap = _pcts(total)
    stage_names = list(BUDGETS)
    stages = []
    for s in stage_names:
        p = _pcts(log[s])
        stages.append(
            {"name": s, **p, "share_of_p99": p["p99"] / snap["p99"], "budget": BUDGETS[s]}
        )
    unattr = total - (
        log["embedding"] + np.maximum(log["retrieval"], log["keyword_search"]) + log["llm"]
    )
    pu = _pcts(unattr)
    stages.append(
        {"name": "unattributed", **pu, "share_of_p99": pu["p99"] / snap["p99"], "budget": None}
    )
    slow = total >= snap["p95"]
    deltas = [
        {
            "stage": s,
            "mean_slow": float(log[s][slow].mean()),
            "mean_fast": float(log[s][~slow].mean()),
            "delta": float(log[s][slow].mean() - log[s][~slow].mean()),
        }
        for s in stage_names
    ]
    driver = max(deltas, key=lambda d: d["delta"])["stage"]
    cohorts = []
    for dim in ("route", "model_variant"):
        for value in np.unique(log[dim]):
            m = log[dim] == value
            share, share_slow = float(m.mean()), float((m & slow).sum() / slow.sum())
            p99 = float(np.percentile(total[m], 99))
            cohorts.append(
                {
                    "dim": dim,
                    "value": str(value),
                    "n": int(m.sum()),
                    "share": share,
                    "p99": p99,
                    "delta_vs_global": p99 - snap["p99"],
                    "share_of_slow": share_slow,
                    "flag": "over-represented in the tail" if share_slow > 1.5 * share else None,
                }
            )
    minute = np.floor(log["t_s"] / 60).astype(int)
    timeline = [
        {
            "t": _iso(START + timedelta(minutes=int(mi))),
            "p99": float(np.percentile(total[minute == mi], 99)),
            "n": int((minute == mi).sum()),
        }
        for mi in np.unique(minute)
    ]
    since = log["t_s"] / 60 - DEPLOY_MIN
    in_cold = (since >= 0) & (since < COLD_MIN)
    unf, fil = float(np.percentile(total, 99)), float(np.percentile(total[~in_cold], 99))
    n_min = float(log["t_s"].max() - log["t_s"].min()) / 60
    q = np.concatenate([np.linspace(0.01, 0.9, 90), 1 - np.logspace(-1, -3.5, 110)])
    shape_llm = _shape("llm", log["seq_len"], log["llm"], "seq_len")
    shape_retr = _shape("retrieval", log["seq_len"], log["retrieval"], "seq_len")
    rng = np.random.default_rng(1)
    before = make_log(n=3000, seed=99)["total"]
    baseline = []
    for k, pq in PCTS.items():
        b, a = float(np.percentile(before, pq)), snap[k]
        boots = [
            np.percentile(rng.choice(total, total.size), pq)
            - np.percentile(rng.choice(before, before.size), pq)
            for _ in range(100)
        ]
        baseline.append(
            {
                "percentile": k,
                "before": b,
                "after": a,
                "change": a - b,  # ms, as the audit reports it
                "ci_low": float(np.percentile(boots, 2.5)),
                "ci_high": float(np.percentile(boots, 97.5)),
            }
        )
    cold_saved = unf - fil
    search = next(c for c in cohorts if c["value"] == "/search")
    ranking = [
        {
            "fix": "warm up replicas before they take traffic",
            "stage": "llm",
            "p99_saved_ms": cold_saved,
            "hours": 4.0,
            "risk": "low",
            "reversible": True,
            "score": cold_saved / 4.0,
        },
        {
            "fix": "cap retrieval with a deadline and a cached fallback",
            "stage": "retrieval",
            "p99_saved_ms": float(search["p99"] - snap["p99"]) * search["share_of_slow"],
            "hours": 16.0,
            "risk": "medium",
            "reversible": True,
            "score": float(search["p99"] - snap["p99"]) * search["share_of_slow"] / 16.0,
        },
    ]
    ranking.sort(key=lambda f: -f["score"])
    return {
        "service": "rag-chat",
        "provenance": {
            "source": "generated RAG log (tests/report/html_sample.py)",
            "format": "numpy",
            "engine": "duckdb",
            "generated_at": "2026-11-01T11:00:00Z",
            "version": "0.1.0",
            "notes": [
                f"{int(slow.sum())} slow requests (at or above p95) vs {int((~slow).sum())} fast"
            ],
        },
        "rows": {
            "total": int(ok.size),
            "used": int(ok.sum()),
            "rejected": missing + negative,
            "rejected_reasons": {"total is missing": missing, "total is negative": negative},
        },
        "slo": SLO,
        "snapshot": {
            **snap,
            "max": float(total.max()),
            "mean": float(total.mean()),
            "verdict": {k: "breach" if snap[k] > SLO[k] else "pass" for k in PCTS},
            "breach_rate_per_min": float((total > SLO["p99"]).sum() / n_min),
        },
        "cdf": [{"q": float(qq), "ms": float(np.quantile(total, qq))} for qq in q],
        "stages": stages,
        "overlap": {"share": 0.0, "nested": False},
        "tail": {"driver": driver, "deltas": deltas},
        "shape": [shape_llm, shape_retr],
        "cohorts": cohorts,
        "cold_start": {
            "window_min": COLD_MIN,
            "unfiltered_p99": unf,
            "filtered_p99": fil,
            "verdict": "cold_start" if unf > 1.1 * fil else "not_cold_start",
            "timeline": timeline,
            "events": [{"t": _iso(START + timedelta(minutes=DEPLOY_MIN)), "event": "deploy v42"}],
        },
        "goodput": {
            "share": float((total <= SLO["p99"]).mean()),
            "min": None,
            "thresholds": {"e2e": SLO["p99"]},
            "verdict": "no_minimum",
        },
        "objectives": [
            {
                "metric": "e2e",
                "percentile": k,
                "target_ms": SLO[k],
                "measured_ms": snap[k],
                "verdict": "breach" if snap[k] > SLO[k] else "pass",
                "gated": k == "p99",
                "n": int(total.size),
            }
            for k in PCTS
        ],
        "baseline": baseline,
        "hypotheses": [
            {
                "kind": "input_shape",
                "stage": "llm",
                "evidence": f"R2 {shape_llm['r2']:.2f} against seq_len",
            },
            {
                "kind": "cold_start",
                "stage": None,
                "evidence": f"p99 {unf:,.0f} -> {fil:,.0f} ms without cold windows",
            },
            {
                "kind": "external_dependency",
                "stage": "retrieval",
                "evidence": f"/search holds {search['share_of_slow']:.0%} of slow requests",
            },
        ],
        "ranking": ranking,
        "refusals": [],
        "recommendation": {"choice": "fix_tail", "text": f"Start with: {ranking[0]['fix']}."},
    }


def make_replay(log: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """A replay dict: 60 s windows every 10 s over `log`, with decisions from two simple rules."""
    log = log or make_log()
    t, total, err = log["t_s"], log["total"], log["error"]
    rules = [
        {
            "name": "scale_before_breach",
            "metric": "p95",
            "op": ">",
            "threshold": 3200.0,
            "for_s": 0.0,
            "action": "scale_up",
            "cooldown_s": 120.0,
            "clear_threshold": None,
        },
        {
            "name": "rollback_on_errors",
            "metric": "error_rate",
            "op": ">",
            "threshold": 0.01,
            "for_s": 60.0,
            "action": "rollback",
            "cooldown_s": 600.0,
            "clear_threshold": None,
        },
    ]
    timeline, decisions = [], []
    last: dict[str, float] = {}
    held: dict[str, float] = {}
    for now in np.arange(60.0, t.max(), 10.0):
        m = (t > now - 60) & (t <= now)
        count = int(m.sum())
        known = count >= 20
        w = {
            "t": _iso(START + timedelta(seconds=float(now))),
            "t_offset_s": float(now),
            "p95": float(np.percentile(total[m], 95)) if known else None,
            "p99": float(np.percentile(total[m], 99)) if known else None,
            "error_rate": float(err[m].mean()) if known else None,
            "count": count,
            "known": known,
        }
        timeline.append(w)
        for r in rules:
            v = w[r["metric"]]
            if v is None or v <= r["threshold"]:
                held.pop(r["name"], None)
                continue
            since = held.setdefault(r["name"], float(now))
            if now - since >= r["for_s"] and now - last.get(r["name"], -1e9) >= r["cooldown_s"]:
                last[r["name"]] = float(now)
                decisions.append(
                    {
                        "t": w["t"],
                        "t_offset_s": float(now),
                        "action": r["action"],
                        "metric": r["metric"],
                        "value": v,
                        "threshold": r["threshold"],
                        "reason": f"{r['metric']} {v:.4g} > {r['threshold']:.4g} "
                        f"for {now - since:.0f} s",
                    }
                )
    return {
        "source": "generated RAG log",
        "baseline_p99_ms": float(np.percentile(total[t < 600], 99)),
        "decisions": decisions,
        "timeline": timeline,
        "policy": {"window_s": 60.0, "evaluate_every_s": 10.0, "min_samples": 20, "rules": rules},
    }
