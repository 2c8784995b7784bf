"""Names never execute downstream (issue 35, item 4).

A service or stage name travels into PromQL label values, Prometheus alert labels and
annotations (Go templates), Flagger queries (Go templates), Argo queries (`{{args.x}}`),
Grafana panels (`$var`) and Markdown. Each is either refused at the budget's load, naming
the character, or written so that promtool accepts every target's output, the label value
reads back as the name, and no template delimiter of the name survives. A `promtool test
rules` case proves the per-stage over-budget alert still fires under a hostile name.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from export_helpers import PROMTOOL, needs_promtool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_export_promql import expressions

from tailbudget._names import go_template_text, markdown_safe, name_problem, promql_string
from tailbudget.budget import Budget, parse_budget
from tailbudget.errors import TailbudgetError
from tailbudget.export import grafana, prometheus_rules
from tests.fleet_exports import fleet_expressions

ISSUE_STAGES = [
    'db"} unless on() vector(1) #',  # the alert could never fire
    'db"} or vector(1) #',  # the alert would always fire
    'say "hi"',  # a double quote made promtool reject the whole file
    '{{ range query "up" }}{{ . }}{{ end }}',  # a query in every notification
    "{{range}}",  # the file would not load
    "/api/v1/{id} ${__user.login} [[service]]",  # Grafana and Argo delimiters
    "<img src=x onerror=alert(1)>",  # raw HTML in Markdown
]
REFUSED = ["a\x85b", "a\u2028b", "a\u2029b", "a\x00b", "a\x9bb", "a\u202eb", "a\ud800b"]


def _budget(service: str, stage: str) -> Budget:
    return parse_budget(
        {
            "service": service,
            "environment": "prd",
            "slo": {"p95": 800, "p99": 1500, "error_rate": 0.01},
            "pipeline": [{"stage": stage, "budget": {"p95": 200, "p99": 300}}],
        }
    )


def _go_unquote(text: str) -> str:
    """A PromQL double-quoted string's inside, read as Prometheus reads it (Go escapes)."""
    simple = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r", "a": "\a"}
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        kind = text[i + 1]
        if kind in simple:
            out.append(simple[kind])
            i += 2
            continue
        width = {"x": 2, "u": 4, "U": 8}[kind]
        out.append(chr(int(text[i + 2 : i + 2 + width], 16)))
        i += 2 + width
    return "".join(out)


_LABEL = re.compile(r'(service|stage|model_name|model)="((?:[^"\\]|\\.)*)"')
_TEMPLATE_ACTION = re.compile(r'\{\{ "([{}])" \}\}')
_OUR_ACTIONS = ('{{ $value | printf "%.4g" }}',)


def _template_shown(text: str) -> str:
    """What Go's text/template prints for an alert label or annotation of ours."""
    for action in _OUR_ACTIONS:
        text = text.replace(action, "VALUE")
    parts = _TEMPLATE_ACTION.split(text)
    # Between the actions printing a brace, no brace is left for Go's lexer to pair.
    assert not any(set(p) & set("{}") for p in parts[::2]), text
    return "".join(parts)


def _rules_files(budget: Budget) -> dict[str, str]:
    out = {"prometheus-rules": prometheus_rules.render(budget)}
    for metrics in ("vllm", "sglang", "tgi"):
        from tailbudget.export import ExportOptions

        out[f"rules {metrics}"] = prometheus_rules.render(budget, ExportOptions(metrics=metrics))
    return out


def _queries(budget: Budget) -> dict[str, str]:
    out = expressions(budget)
    for metrics in ("vllm", "sglang", "tgi"):
        out.update({f"{metrics} {k}": v for k, v in fleet_expressions(budget, metrics).items()})
    return out


def _promtool_check(budget: Budget, folder: Path) -> None:
    files = []
    for i, text in enumerate(_rules_files(budget).values()):
        files.append(folder / f"rules{i}.yaml")
        files[-1].write_text(text)
    queries = [
        {"record": f"check:expr:{i}", "expr": e} for i, e in enumerate(_queries(budget).values())
    ]
    files.append(folder / "queries.yaml")
    files[-1].write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": queries}]}))
    run = subprocess.run(
        [PROMTOOL, "check", "rules", *map(str, files)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr


def _check_written_as_given(budget: Budget) -> None:
    names = {budget.service, *(s.name for _, s in budget.stages())}
    exprs = [
        rule["expr"]
        for text in _rules_files(budget).values()
        for group in yaml.safe_load(text)["groups"]
        for rule in group["rules"]
    ]
    texts = [*exprs, *_queries(budget).values()]
    for text in texts:
        for _, value in _LABEL.findall(text):
            assert _go_unquote(value) in names | {""}, value
        # No template engine (Flagger's Go templates, Argo's {{args}}, Grafana's $var)
        # sees a delimiter of a name inside a query.
        bare = text
        for var in ("{{ namespace }}", "{{ target }}", "{{ interval }}", "{{args.canary-hash}}",
                    "{{args.stable-hash}}", "$__rate_interval", "$__interval"):  # fmt: skip
            bare = bare.replace(var, "")
        for m in _LABEL.finditer(bare):
            assert not set(m.group(2)) & set("{}$[]`"), m.group(0)
    doc, _ = prometheus_rules.build(budget)
    for group in doc["groups"]:
        for rule in group["rules"]:
            for key in ("labels", "annotations"):
                for value in rule.get(key, {}).values():
                    _template_shown(value)
    dash = grafana.build(budget)
    for panel in dash["panels"]:
        assert "[[" not in panel["title"] and not re.search(r"\$[\w{]", panel["title"])


def _accepted(service: str, stage: str) -> Budget | None:
    try:
        return _budget(service, stage)
    except TailbudgetError as exc:
        text = str(exc)
        assert "\n" not in text
        problem = name_problem(stage) or name_problem(service)
        assert problem is None or re.search(r"U\+[0-9A-F]{4}|unicode", text), text
        return None


@pytest.mark.parametrize("name", REFUSED)
@pytest.mark.parametrize("where", ["service", "stage"])
def test_names_no_target_can_carry_are_refused_naming_the_character(name: str, where: str) -> None:
    service, stage = (name, "db") if where == "service" else ("svc", name)
    with pytest.raises(TailbudgetError) as info:
        _budget(service, stage)
    text = str(info.value)
    assert "\n" not in text, text
    # A surrogate is refused by pydantic itself, as no unicode string.
    assert f"U+{ord(name[1]):04X}" in text or "unicode" in text, text


@needs_promtool
@pytest.mark.parametrize("name", ISSUE_STAGES)
def test_the_issue_payloads_are_escaped_in_every_target(name: str, tmp_path: Path) -> None:
    budget = _budget(name, name)
    _promtool_check(budget, tmp_path)
    _check_written_as_given(budget)


def test_the_old_stage_selector_is_escaped() -> None:
    # Before: stage="<name>" raw, so `db"} unless on() vector(1) #` closed the selector.
    doc, _ = prometheus_rules.build(_budget("svc", ISSUE_STAGES[0]))
    exprs = [
        r["expr"] for g in doc["groups"] for r in g["rules"] if "StageOver" in r.get("alert", "")
    ]
    assert exprs and all('stage="db\\"\\x7d unless on() vector(1) #"}' in e for e in exprs)


_ANY = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())


@needs_promtool
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    service=st.one_of(st.text(_ANY, min_size=1, max_size=12), st.sampled_from(ISSUE_STAGES)),
    stage=st.one_of(st.text(_ANY, min_size=1, max_size=12), st.sampled_from(ISSUE_STAGES)),
)
def test_any_unicode_name_is_refused_or_passes_promtool(
    service: str, stage: str, tmp_path: Path
) -> None:
    budget = _accepted(service, stage)
    if budget is None:
        return
    folder = tmp_path / f"x{abs(hash((service, stage)))}"
    folder.mkdir()
    _promtool_check(budget, folder)
    _check_written_as_given(budget)


@given(st.text(_ANY, max_size=20))
def test_escapes_read_back_as_the_name(text: str) -> None:
    assert _go_unquote(promql_string(text)) == text
    assert _template_shown(go_template_text(text)) == text


# ---- the alert still fires (Prometheus' own rule engine) ---------------------------

STAGE_P99 = "service_stage:tailbudget_stage_duration_seconds:p99_rate1m"


@needs_promtool
@pytest.mark.parametrize("name", ISSUE_STAGES[:5])
def test_the_stage_alert_fires_under_a_hostile_name(name: str, tmp_path: Path) -> None:
    budget = _budget(f"svc {name}", name)
    rules = tmp_path / "rules.yaml"
    rules.write_text(prometheus_rules.render(budget))
    doc, _ = prometheus_rules.build(budget)
    alert = next(
        r for g in doc["groups"] for r in g["rules"] if r.get("alert", "").endswith("P99")
        and "StageOverBudget" in r["alert"]
    )  # fmt: skip
    # The input series is written with JSON's escaping, not ours: the rule must select it.
    labels = f"service={json.dumps(budget.service)}, stage={json.dumps(name)}"
    expected: dict[str, Any] = {
        "exp_labels": {
            "alertname": alert["alert"],
            "severity": "info",
            "service": budget.service,
            "stage": name,
            "percentile": "p99",
        },
        "exp_annotations": {
            k: _template_shown(v).replace("VALUE", "0.5") for k, v in alert["annotations"].items()
        },
    }
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "10s",
        "tests": [
            {
                "interval": "10s",
                "input_series": [{"series": f"{STAGE_P99}{{{labels}}}", "values": "0.5+0x60"}],
                "alert_rule_test": [
                    {"eval_time": "1m", "alertname": alert["alert"], "exp_alerts": []},
                    {"eval_time": "3m", "alertname": alert["alert"], "exp_alerts": [expected]},
                ],
            }
        ],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, allow_unicode=True))
    run = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr


# ---- Markdown ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "shown"),
    [
        ("stage <img src=x onerror=alert(1)> p99", "stage &lt;img src=x onerror=alert(1)> p99"),
        ("a [x](javascript:alert(1))", "a [x]\\(javascript:alert(1))"),
        ("`<b>` kept in a code span", "`<b>` kept in a code span"),
        ("a ` <script>", "a ` &lt;script>"),
        ("p99 < 900 ms", "p99 < 900 ms"),
        ("``a`b`` <i>", "``a`b`` &lt;i>"),
    ],
)
def test_markdown_holds_no_raw_html_or_link(doc: str, shown: str) -> None:
    assert markdown_safe(doc) == shown


IMG = "<img src=x onerror=alert(1)>"


def test_budget_and_log_names_reach_markdown_as_text() -> None:
    import numpy as np
    import pandas as pd

    import tailbudget as tb

    plan = tb.plan(_budget(f"svc {IMG}", IMG))
    rng = np.random.default_rng(1)
    log = pd.DataFrame(
        {"total_ms": rng.lognormal(5, 0.3, 400) + 60, f"{IMG}_ms": rng.lognormal(4, 0.3, 400)}
    )
    audit = tb.audit(log, slo="p99=900")
    for report in (plan, audit):
        md = report.to_markdown()
        assert "<img" not in md and "&lt;img src=x onerror=alert(1)>" in md
        assert report._repr_markdown_() == md
