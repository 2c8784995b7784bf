"""Every PromQL expression any target emits parses in Prometheus (checked by promtool).

promtool has no command for a bare query, so the expressions go into a rules
file as recording rules; Flagger's template variables get sample values first.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from export_helpers import PROMTOOL, needs_promtool

from tailbudget.budget import Budget
from tailbudget.export import argo, flagger, grafana, keda, openslo
from tests.fleet_exports import chat, fleet_expressions, ttft_only

FLAGGER_VARS = {"{{ namespace }}": "prod", "{{ target }}": "rag", "{{ interval }}": "1m"}


def expressions(budget: Budget) -> dict[str, str]:
    """Name -> PromQL for everything but the rules file (checked on its own)."""
    out: dict[str, str] = {}
    doc, _ = keda.build(budget)
    out["keda"] = doc["spec"]["triggers"][0]["metadata"]["query"]
    doc, _ = argo.build(budget)
    for m in doc["spec"]["metrics"]:
        if "prometheus" in m["provider"]:
            out[f"argo {m['name']}"] = m["provider"]["prometheus"]["query"]
    templates, _, _ = flagger.build(budget)
    for t in templates:
        query = t["spec"]["query"]
        for var, value in FLAGGER_VARS.items():
            query = query.replace(var, value)
        out[f"flagger {t['metadata']['name']}"] = query
    for d in openslo.build(budget):
        ratio = d["spec"]["indicator"]["spec"]["ratioMetric"]
        for part in ("good", "total"):
            out[f"openslo {d['metadata']['name']} {part}"] = ratio[part]["metricSource"]["spec"][
                "query"
            ]
    dash = grafana.build(budget)
    for p in dash["panels"]:
        for t in p["targets"]:
            out[f"grafana {p['title']} {t['refId']}"] = t["expr"]
    for a in dash["annotations"]["list"]:
        if "expr" in a:
            out[f"grafana annotation {a['name']}"] = a["expr"]
    return out


@needs_promtool
def test_every_emitted_query_parses(template_budget: Budget, tmp_path: Path) -> None:
    exprs = expressions(template_budget)
    assert len(exprs) > 10
    check_parses(exprs, tmp_path)


def check_parses(exprs: dict[str, str], tmp_path: Path) -> None:
    """promtool accepts every expression (as recording rules)."""
    rules: list[dict[str, Any]] = [
        {"record": f"check:expr:{i}", "expr": e} for i, e in enumerate(exprs.values())
    ]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}))
    run = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr + "\n" + "\n".join(exprs)


@needs_promtool
@pytest.mark.parametrize("metrics", ["vllm", "sglang", "tgi"])
@pytest.mark.parametrize("budget", [chat, ttft_only], ids=["chat", "ttft_only"])
def test_every_fleet_query_parses(
    metrics: str, budget: Callable[[], Budget], tmp_path: Path
) -> None:
    exprs = fleet_expressions(budget(), metrics)
    assert len(exprs) >= 5
    check_parses(exprs, tmp_path)
