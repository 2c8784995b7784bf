"""The fleet-preset export tests' budgets (an LLM chat service with every objective kind)
and the PromQL each fleet export emits, shared by tests/export and tests/integration."""

from __future__ import annotations

from typing import Any

from tailbudget.budget import Budget, parse_budget
from tailbudget.export import ExportOptions, argo, flagger, grafana, openslo

FLAGGER_VARS = {"{{ namespace }}": "prod", "{{ target }}": "rag", "{{ interval }}": "1m"}

CHAT: dict[str, Any] = {
    "service": "Llama-3.3-70B",
    "environment": "prd",
    "slo": {
        "e2e": {"p95": 6000, "p99": 9000},
        "ttft": {"p95": 400, "p99": 2000},
        "tpot": {"p99": 60},
        "itl": {"p99": 150},
        "stages": {"queue": {"p99": 200}},
        "goodput": {"min": 0.9},
        "error_rate": 0.01,
    },
    "pipeline": [{"stage": "llm", "budget": {"p95": 5000, "p99": 8000}}],
    "policy": "default",
}
"""Every objective; the LLM default policy (ttft scale/shed, goodput and ttft.p99 rollback)."""

TTFT_ONLY: dict[str, Any] = {
    "service": "chat",
    "slo": {"ttft": {"p95": 500, "p99": 2500}, "goodput": {"min": 0.9}, "error_rate": 0.01},
    "pipeline": [{"stage": "llm", "budget": {"p95": 5000, "p99": 8000}}],
    "policy": "default",
}
"""One per-request metric, so goodput is one histogram's share (ttft under 2.5 s)."""


def chat(**changes: Any) -> Budget:
    """The CHAT budget with top-level changes."""
    return parse_budget({**CHAT, **changes})


def ttft_only(**changes: Any) -> Budget:
    """The TTFT_ONLY budget with top-level changes."""
    return parse_budget({**TTFT_ONLY, **changes})


ARGO_ARGS = {"{{args.canary-hash}}": "abc123", "{{args.stable-hash}}": "def456"}


def fleet_expressions(budget: Budget, metrics: str) -> dict[str, str]:
    """Name -> PromQL of the Argo, Flagger, OpenSLO and Grafana exports for a preset."""
    opts = ExportOptions(metrics=metrics)
    out: dict[str, str] = {}
    doc, _ = argo.build_fleet(budget, opts)
    for m in doc["spec"]["metrics"]:
        if "prometheus" in m["provider"]:
            query = m["provider"]["prometheus"]["query"]
            for var, value in ARGO_ARGS.items():
                query = query.replace(var, value)
            out[f"argo {m['name']}"] = query
    templates, _, _ = flagger.build_fleet(budget, opts)
    for t in templates:
        query = t["spec"]["query"]
        for var, value in FLAGGER_VARS.items():
            query = query.replace(var, value)
        out[f"flagger {t['metadata']['name']}"] = query
    docs, _ = openslo.build_fleet(budget, opts)
    for d in docs:
        ratio = d["spec"]["indicator"]["spec"]["ratioMetric"]
        for part in ("good", "total"):
            query = ratio[part]["metricSource"]["spec"]["query"]
            out[f"openslo {d['metadata']['name']} {part}"] = query
    dash, _ = grafana.build_fleet(budget, opts)
    for p in dash["panels"]:
        for t in p["targets"]:
            out[f"grafana {p['title']} {t['refId']}"] = t["expr"]
    return out
