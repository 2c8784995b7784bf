"""`--metrics vllm|sglang|tgi`: rules and KEDA on the server's own histograms, bucket warnings."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from export_helpers import PROMTOOL, budget_with_policy, needs_promtool

from tailbudget._fleet import PRESETS, check_target
from tailbudget.errors import PolicyError
from tailbudget.export import ExportOptions, export
from tailbudget.serve.prometheus_source import PrometheusSource
from tests.fleet_exports import chat, ttft_only

LLM_RULES = {
    "window": "30s",
    "evaluate_every": "5s",
    "rules": [
        {"name": "scale_ttft", "metric": "ttft.p95", "threshold": 450, "action": "scale_up"},
        {
            "name": "shed_ttft",
            "metric": "ttft.p95",
            "threshold": 500,
            "for": "2m",
            "action": "shed_load",
        },
        {"name": "slow_tokens", "metric": "tpot.p99", "threshold": 80, "action": "trim_logging"},
    ],
}


def _doc(text: str) -> dict:
    return yaml.safe_load(text)


@pytest.mark.parametrize("metrics", ["vllm", "sglang"])
def test_the_keda_trigger_runs_the_expression_the_alert_compares(metrics: str) -> None:
    budget = budget_with_policy(LLM_RULES)
    opts = ExportOptions(metrics=metrics)
    rules = _doc(export(budget, "prometheus-rules", opts))
    keda = _doc(export(budget, "keda", opts))
    alert = next(
        r for g in rules["groups"] for r in g["rules"] if r.get("alert", "").endswith("scale_ttft")
    )
    trigger = keda["spec"]["triggers"][0]["metadata"]
    value = alert["expr"].split(" > ")[0]
    assert value in trigger["query"] and trigger["threshold"] == "0.45"
    hist = PRESETS[metrics].series["ttft"].histogram
    assert f"{hist}_bucket" in value and 'model_name="' in value


def test_a_metric_the_server_lacks_is_named_not_guessed() -> None:
    text = export(
        budget_with_policy(LLM_RULES), "prometheus-rules", ExportOptions(metrics="sglang")
    )
    assert "rule slow_tokens (tpot.p99): sglang exports no such series" in text
    assert "slow_tokens" not in "".join(
        r.get("alert", "") for g in _doc(text)["groups"] for r in g["rules"]
    )
    with pytest.raises(PolicyError, match="no scale_up rule on a percentile tgi exports"):
        export(budget_with_policy(LLM_RULES), "keda", ExportOptions(metrics="tgi"))


def test_vllm_e2e_starts_at_300_ms_so_a_200_ms_target_cannot_be_measured() -> None:
    e2e = PRESETS["vllm"].series["e2e"]
    check = check_target(e2e, 200.0, "p95")
    assert check.below is None and check.above == 0.3 and check.nearest == 0.3
    assert "cannot be measured" in (check.warning or "")
    between = check_target(PRESETS["vllm"].series["ttft"], 150.0, "ttft.p95")
    assert (between.below, between.above) == (0.1, 0.25)
    assert "2.5x gap" in (between.warning or "")
    exact = check_target(PRESETS["vllm"].series["ttft"], 500.0, "ttft.p95")
    assert exact.exact and exact.warning is None


def test_the_burn_rate_sli_says_which_le_bound_stands_in() -> None:
    budget = budget_with_policy(LLM_RULES, slo={"p95": 200, "p99": 9000})
    text = export(budget, "prometheus-rules", ExportOptions(metrics="vllm"))
    assert "nearest bound le=0.3 s (300 ms) instead" in text
    assert "nearest bound le=10 s" in text
    records = [r for g in _doc(text)["groups"] for r in g["rules"] if "record" in r]
    assert records and all('le="0.3"' in r["expr"] or 'le="10.0"' in r["expr"] for r in records)


def test_every_mapped_objective_gets_a_burn_rate_sli_on_its_nearest_bound() -> None:
    text = export(chat(), "prometheus-rules", ExportOptions(metrics="vllm"))
    records = {r["record"]: r for g in _doc(text)["groups"] for r in g["rules"] if "record" in r}
    ttft = records["vllm:ttft_p95_slow_ratio:rate1h"]
    assert ttft["labels"] == {"le_used": "0.5", "target_ms": "400"}
    assert (
        'vllm:time_to_first_token_seconds_bucket{model_name="Llama-3.3-70B", le="0.5"}'
        in (ttft["expr"])
    )
    assert records["vllm:queue_p99_slow_ratio:rate5m"]["labels"]["le_used"] == "0.3"
    assert "vllm:p95_slow_ratio:rate1h" in records  # end to end keeps its name
    assert "ttft.p95 SLI: no bucket at 400 ms in vllm:time_to_first_token_seconds" in text
    assert "queue.p99 SLI target 200 ms is below the first bucket" in text
    tgi = export(chat(), "prometheus-rules", ExportOptions(metrics="tgi"))
    assert "objective ttft.p95: tgi exports no ttft histogram" in tgi


def test_alert_annotations_name_the_buckets_around_the_threshold() -> None:
    text = export(ttft_only(), "prometheus-rules", ExportOptions(metrics="vllm"))
    alerts = {r["alert"]: r for g in _doc(text)["groups"] for r in g["rules"] if "alert" in r}
    assert alerts["chat_scale_up_ttft_p95"]["annotations"]["buckets"] == (
        "le 0.25 s .. 0.5 s around the threshold"
    )
    assert alerts["chat_shed_load_ttft_p95"]["annotations"]["buckets"] == (
        "le 0.5 s (a bound at the target) around the threshold"
    )


@needs_promtool
@pytest.mark.parametrize("metrics", ["vllm", "sglang", "tgi"])
@pytest.mark.parametrize("which", ["llm_rules", "chat", "ttft_only"])
def test_fleet_rule_files_pass_promtool(metrics: str, which: str, tmp_path) -> None:
    budget = {
        "llm_rules": lambda: budget_with_policy(LLM_RULES),
        "chat": chat,
        "ttft_only": ttft_only,
    }[which]()
    path = tmp_path / "rules.yaml"
    path.write_text(export(budget, "prometheus-rules", ExportOptions(metrics=metrics)))
    check = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_unknown_preset_is_one_line() -> None:
    with pytest.raises(PolicyError, match=r"^metrics must be one of tailbudget, vllm"):
        export(budget_with_policy(LLM_RULES), "keda", ExportOptions(metrics="triton"))


def test_the_prometheus_source_reads_each_servers_series() -> None:
    vllm = PrometheusSource("http://127.0.0.1:1", "m", 30, metrics="vllm", series={"ttft": [0.95]})
    q = vllm.queries()
    assert 'vllm:time_to_first_token_seconds_bucket{model_name="m"}' in q["ttft.p95"]
    assert "errors" not in q  # vLLM counts no failures: error-rate rules stay unknown
    sglang = PrometheusSource("http://127.0.0.1:1", "m", 30, metrics="sglang")
    assert 'sglang:num_aborted_requests_total{model_name="m"}' in sglang.queries()["errors"]
    tgi = PrometheusSource("http://127.0.0.1:1", "m", 30, metrics="tgi", series={"ttft": [0.95]})
    assert "ttft.p95" not in tgi.queries()  # TGI has no TTFT histogram
    assert "tgi_request_duration_bucket{}" in tgi.queries()["p95"]
    checks = vllm.buckets({"p95": 200.0, "ttft.p95": 500.0})
    assert checks["p95"].warning and checks["ttft.p95"].warning is None


def test_error_rate_rules_read_the_servers_failure_counter_where_it_has_one() -> None:
    text = export(ttft_only(), "prometheus-rules", ExportOptions(metrics="sglang"))
    alerts = {r["alert"]: r for g in _doc(text)["groups"] for r in g["rules"] if "alert" in r}
    err = alerts["chat_rollback_error_rate"]
    assert 'sglang:num_aborted_requests_total{model_name="chat"}[1m]' in err["expr"]
    assert "clamp_min(" in err["expr"] and ") > 0.01 and on () (" in err["expr"]
    assert err["for"] == "2m" and err["labels"]["action"] == "rollback"
    assert "the rules have no baseline version to compare with" in text
    vllm = export(ttft_only(), "prometheus-rules", ExportOptions(metrics="vllm"))
    assert "rule rollback_error_rate (error_rate): vllm counts no failed requests" in vllm
