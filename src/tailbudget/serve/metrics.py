"""`/metrics`: a collector that reads the runtime at scrape time, in its own registry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailbudget import _metric_names as names
from tailbudget.budget.metric import parse_metric
from tailbudget.budget.policy import TRIGGER_ACTIONS
from tailbudget.control.series_windows import GOODPUT

if TYPE_CHECKING:
    from tailbudget.serve.runtime import Runtime

__all__ = ["RuntimeCollector", "make_registry"]


def _counter_base(name: str) -> str:
    # CounterMetricFamily appends `_total` itself.
    return name.removesuffix("_total")


class RuntimeCollector(Collector):
    """Exports the controller's view: window quantiles, actions, replicas, counters."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        """One consistent read of the runtime per scrape."""
        view = self.runtime.metrics_view()
        window = GaugeMetricFamily(
            names.WINDOW_QUANTILE,
            "Rolling-window end-to-end latency quantile (absent while the window is unknown).",
            labels=["quantile"],
        )
        for q, key in (("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99")):
            ms = view["window"].get(key)
            if ms is not None:
                window.add_metric([q], ms / 1000.0)
        yield window
        yield from _stage_metrics(view)
        yield from _class_metrics(view)
        yield from _series_metrics(view)
        yield GaugeMetricFamily(
            "tailbudget_evaluation_age_seconds",
            "Seconds since the last good policy evaluation (the verdict is unknown past two "
            "evaluation periods).",
            value=float(view["evaluation_age_s"]),
        )
        failed = CounterMetricFamily(
            "tailbudget_evaluation_errors",
            "Policy evaluations that could not judge, by kind (deadline, timeout, bad_answer...).",
            labels=["kind"],
        )
        for kind, n in sorted(view["evaluation_errors"].items()):
            failed.add_metric([kind], float(n))
        yield failed
        yield GaugeMetricFamily(
            "tailbudget_window_known",
            "1 when the window holds enough samples to judge, 0 when it is unknown.",
            value=1.0 if view["window"].get("known") else 0.0,
        )
        upper = view["window"].get("error_rate_upper")
        if upper is not None:
            yield GaugeMetricFamily(
                "tailbudget_window_error_rate_upper",
                "Upper confidence bound (Wilson) of the window's error rate.",
                value=float(upper),
            )
        active = GaugeMetricFamily(
            names.ACTIVE_ACTION, "1 while an action is in force.", labels=["action"]
        )
        for action in TRIGGER_ACTIONS:
            active.add_metric([action], 1.0 if action in view["active"] else 0.0)
        yield active
        yield GaugeMetricFamily(
            names.DESIRED_REPLICAS,
            "Replicas the controller asks for (KEDA/HPA read it).",
            value=float(view["desired_replicas"]),
        )
        yield from _model_metrics(view)
        yield GaugeMetricFamily(
            "tailbudget_shed_fraction",
            "Share of low-priority requests the shed action asks to refuse.",
            value=float(view["shed_fraction"]),
        )
        yield CounterMetricFamily(
            _counter_base(names.OBSERVATIONS_TOTAL),
            "Observations the service accepted (durably).",
            value=float(view["observations_total"]),
        )
        yield CounterMetricFamily(
            "tailbudget_observation_errors",
            "Accepted observations marked as errors.",
            value=float(view["errors_total"]),
        )
        value = GaugeMetricFamily(
            "tailbudget_rule_value",
            "The value each rule last measured (seconds for latency rules, else a ratio).",
            labels=["rule", "metric"],
        )
        threshold = GaugeMetricFamily(
            "tailbudget_rule_threshold",
            "Each rule's trigger threshold (seconds for latency rules, else a ratio).",
            labels=["rule", "metric"],
        )
        for rule in view["rules"]:
            scale = 0.001 if parse_metric(str(rule["metric"])).latency else 1.0
            labels = [str(rule["name"]), str(rule["metric"])]
            threshold.add_metric(labels, float(rule["threshold"]) * scale)
            if rule.get("value") is not None:
                value.add_metric(labels, float(rule["value"]) * scale)
        yield value
        yield threshold
        decisions = CounterMetricFamily(
            _counter_base(names.DECISIONS_TOTAL),
            "Decisions the controller took (journaled), by action and rule.",
            labels=["action", "rule"],
        )
        for (action, rule), n in sorted(view["decisions_total"].items()):
            decisions.add_metric([action, rule], float(n))
        yield decisions


def _model_metrics(view: dict[str, Any]) -> Iterator[Metric]:
    """The model policy's predicted and measured objectives side by side (serve --model)."""
    model = view.get("model")
    if model is None:
        return
    for name, key, text in (
        ("tailbudget_model_predicted_seconds", "predicted", "The model's prediction"),
        ("tailbudget_model_measured_seconds", "measured", "Measured over the last minute"),
    ):
        fam = GaugeMetricFamily(
            name, f"{text} of each e2e/TTFT objective at the current load.", labels=["objective"]
        )
        for objective, ms in sorted(model[key].items()):
            fam.add_metric([objective], float(ms) / 1000.0)
        yield fam
    yield GaugeMetricFamily(
        "tailbudget_model_drifting",
        "1 while measured departs from the model beyond its stated error (the rules guard).",
        value=1.0 if model["drifting"] else 0.0,
    )
    yield GaugeMetricFamily(
        "tailbudget_model_replicas",
        "Replicas the fitted model says meet every objective with headroom at the forecast load.",
        value=float(model["model_replicas"]),
    )


def _stage_metrics(view: dict[str, Any]) -> Iterator[Metric]:
    """Per-stage window quantiles and counts, and the per-stage counter."""
    quantiles = GaugeMetricFamily(
        names.STAGE_WINDOW_QUANTILE,
        "Rolling-window latency quantile of each stage (absent while its window is empty).",
        labels=["stage", "quantile"],
    )
    counts = GaugeMetricFamily(
        names.STAGE_WINDOW_OBSERVATIONS,
        "Observations of each stage in the rolling window.",
        labels=["stage"],
    )
    for stage, stats in view["stages"].items():
        counts.add_metric([stage], float(stats.count))
        for q, ms in (("0.5", stats.p50), ("0.95", stats.p95), ("0.99", stats.p99)):
            if ms is not None:
                quantiles.add_metric([stage, q], ms / 1000.0)
    yield quantiles
    yield counts
    total = CounterMetricFamily(
        _counter_base(names.STAGE_OBSERVATIONS_TOTAL),
        "Per-stage times the service accepted (durably), by stage.",
        labels=["stage"],
    )
    for stage, n in sorted(view["stage_observations"].items()):
        total.add_metric([stage], float(n))
    yield total


def _class_metrics(view: dict[str, Any]) -> Iterator[Metric]:
    """Per-class window quantiles and the per-class counter (label set: the budget's
    classes and `other`)."""
    if "classes" not in view:
        return
    quantiles = GaugeMetricFamily(
        "tailbudget_class_window_latency_seconds",
        "Rolling-window end-to-end latency quantile of each class (absent while empty).",
        labels=["class", "quantile"],
    )
    for name, stats in view["classes"].items():
        for q, ms in (("0.5", stats.p50), ("0.95", stats.p95), ("0.99", stats.p99)):
            if ms is not None:
                quantiles.add_metric([name, q], ms / 1000.0)
    yield quantiles
    total = CounterMetricFamily(
        "tailbudget_class_observations",
        "Observations the service accepted per class (labels outside the budget's list: other).",
        labels=["class"],
    )
    for name, n in sorted(view["class_observations"].items()):
        total.add_metric([name], float(n))
    yield total
    shed = GaugeMetricFamily(
        "tailbudget_class_shed",
        "1 while the class is shed (shed_load sheds the highest priority number first).",
        labels=["class"],
    )
    for name in view["classes_ruled"]:
        shed.add_metric([name], float(name in view["classes_shed"]))
    yield shed


def _series_metrics(view: dict[str, Any]) -> Iterator[Metric]:
    """LLM series window quantiles (ttft, tpot, itl) and the window's goodput."""
    quantiles = GaugeMetricFamily(
        names.SERIES_WINDOW_QUANTILE,
        "Rolling-window quantile of each LLM series (absent while its window is empty).",
        labels=["series", "quantile"],
    )
    goodput = GaugeMetricFamily(
        names.WINDOW_GOODPUT,
        "Share of judged requests in the window that met every goodput threshold.",
    )
    for name, stats in view["series"].items():
        if name == GOODPUT:
            if stats.count:
                goodput.add_metric([], 1.0 - stats.errors / stats.count)
            continue
        for q, ms in (("0.5", stats.p50), ("0.95", stats.p95), ("0.99", stats.p99)):
            if ms is not None:
                quantiles.add_metric([name, q], ms / 1000.0)
    yield quantiles
    yield goodput


def make_registry(runtime: Runtime) -> CollectorRegistry:
    """A dedicated registry (never the global one) holding the runtime's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RuntimeCollector(runtime))
    return registry
