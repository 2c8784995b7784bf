"""The Grafana dashboard model, field by field.

No JSON schema of the dashboard model is published as a file; these checks follow
https://grafana.com/docs/grafana/latest/dashboards/build-dashboards/view-dashboard-json-model/
(top-level fields, panels with gridPos on a 24-column grid, templating, annotations)
and https://grafana.com/docs/grafana/latest/panels-visualizations/configure-thresholds/
(thresholds: mode absolute, steps with a null base, shown as lines via
`custom.thresholdsStyle.mode`).
"""

from __future__ import annotations

import json

from tailbudget.budget import Budget
from tailbudget.export import grafana


def test_dashboard_top_level_fields(template_budget: Budget) -> None:
    text = grafana.render(template_budget)
    dash = json.loads(text)
    assert dash == grafana.build(template_budget)
    assert dash["schemaVersion"] == grafana.SCHEMA_VERSION >= 36
    assert isinstance(dash["uid"], str) and 0 < len(dash["uid"]) <= 40
    assert dash["title"].endswith(template_budget.service)
    assert dash["time"] == {"from": "now-6h", "to": "now"}
    (var,) = dash["templating"]["list"]
    assert var["type"] == "datasource" and var["query"] == "prometheus"


def test_panels_sit_on_the_grid_without_overlap(template_budget: Budget) -> None:
    panels = grafana.build(template_budget)["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']} overlaps"
                cells.add((x, y))


def test_a_percentile_panel_per_stage_with_its_budget_lines(rag: Budget) -> None:
    panels = {p["title"]: p for p in grafana.build(rag)["panels"]}
    for _, stage in rag.stages():
        panel = panels[f"stage {stage.name}"]
        assert panel["type"] == "timeseries"
        exprs = [t["expr"] for t in panel["targets"]]
        assert [t["legendFormat"] for t in panel["targets"]] == ["p50", "p95", "p99"]
        assert all(f'stage="{stage.name}"' in e for e in exprs)
        assert "service_stage:tailbudget_stage_duration_seconds:p99_rate1m" in exprs[2]
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["unit"] == "s"
        steps = defaults["thresholds"]["steps"]
        assert defaults["thresholds"]["mode"] == "absolute" and steps[0]["value"] is None
        assert stage.budget is not None
        assert [s["value"] for s in steps[1:]] == sorted(
            v / 1000 for v in stage.budget.given().values()
        )
        assert defaults["custom"]["thresholdsStyle"]["mode"] == "dashed"
    e2e = panels["rag-chat: end-to-end latency"]
    lines = [s["value"] for s in e2e["fieldConfig"]["defaults"]["thresholds"]["steps"][1:]]
    assert {1.3, 2.8, 5.2, 1.8, 3.0} <= set(lines)  # SLO and policy thresholds (s)
    errors = panels["error ratio"]
    assert errors["fieldConfig"]["defaults"]["unit"] == "percentunit"
    assert [s["value"] for s in errors["fieldConfig"]["defaults"]["thresholds"]["steps"][1:]] == [
        0.01
    ]


def test_controller_actions_are_annotations(rag: Budget) -> None:
    annotations = grafana.build(rag)["annotations"]["list"]
    actions = next(a for a in annotations if a["name"] == "tailbudget actions")
    assert "increase(tailbudget_decisions_total" in actions["expr"]
    assert actions["expr"].endswith("> 0")
    assert actions["titleFormat"] == "{{action}}" and actions["tagKeys"] == "action,rule"
    assert actions["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert actions["enable"] is True


def test_burn_rate_panels_read_the_slo_rules_with_the_alert_factors(rag: Budget) -> None:
    panels = {p["title"]: p for p in grafana.build(rag)["panels"]}
    errors = panels["error budget burn rate (1h)"]
    assert errors["targets"][0]["expr"] == (
        'service:tailbudget_requests:error_ratio_rate1h{service="rag-chat"} / 0.01'
    )
    steps = errors["fieldConfig"]["defaults"]["thresholds"]["steps"][1:]
    assert [s["value"] for s in steps] == [1.0, 6.0, 14.4]
    latency = panels["latency SLI burn rate (1h)"]
    (target,) = latency["targets"]  # prd gates p99 only
    assert target["legendFormat"] == "p99"
    assert target["expr"].endswith('slow_ratio_p99_rate1h{service="rag-chat"} / 0.01')
