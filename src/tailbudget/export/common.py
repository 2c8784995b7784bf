"""What every export target shares: options, PromQL names and formatting helpers.

The recording-rule names below are the contract between the rules file and the
KEDA, Argo, Grafana and OpenSLO outputs that read them; they follow the
Prometheus `level:metric:operations` convention.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import yaml
from prometheus_client import utils as _client_utils

from tailbudget import _metric_names as names
from tailbudget._json import JsonDict, JsonValue
from tailbudget._names import go_template_text, promql_string
from tailbudget._units import PERCENTILES, quantile_of
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objective
from tailbudget.budget.policy import Policy, resolve_policy
from tailbudget.budget.policy_model import Rule
from tailbudget.errors import BudgetError
from tailbudget.export.names import check_label, check_subdomain, check_url

GENERATOR = "tailbudget export"
LABEL_PREFIX = "tailbudget.dev"
"""Prefix of the Kubernetes labels/annotations and OpenSLO annotations we write."""


@dataclass(frozen=True)
class BurnWindow:
    """One multi-window multi-burn-rate alert: both windows must burn faster than `factor`."""

    long_s: float
    short_s: float
    factor: float
    severity: str

    def __post_init__(self) -> None:
        if not self.short_s < self.long_s:
            raise BudgetError(
                f"burn window: the short window ({promql_duration(self.short_s)}) must be "
                f"shorter than the long one ({promql_duration(self.long_s)})"
            )
        if not self.factor > 0:
            raise BudgetError(f"burn window: the burn factor must be > 0, got {self.factor:g}")


DEFAULT_BURN_WINDOWS: tuple[BurnWindow, ...] = (
    BurnWindow(3600.0, 300.0, 14.4, "page"),
    BurnWindow(21600.0, 1800.0, 6.0, "page"),
    BurnWindow(259200.0, 21600.0, 1.0, "ticket"),
)
"""The SRE workbook's pairs: 2% of a 30-day budget in 1h, 5% in 6h, 10% in 3d."""

_BURN = re.compile(r"^\s*(\w+)\s*/\s*(\w+)\s*[:=@]\s*(\d+(?:\.\d+)?)\s*(?::\s*(page|ticket))?\s*$")


def parse_burn_windows(text: str) -> tuple[BurnWindow, ...]:
    """'1h/5m:14.4,6h/30m:6,3d/6h:1:ticket' -> burn windows (severity page when > 1x)."""
    out: list[BurnWindow] = []
    for part in text.split(","):
        m = _BURN.match(part)
        if not m:
            raise BudgetError(
                f"burn: each window pair looks like LONG/SHORT:FACTOR, e.g. 1h/5m:14.4, "
                f"got {part.strip()!r}",
                param="burn",
            )
        long_s = parse_promql_duration(m.group(1))
        short_s = parse_promql_duration(m.group(2))
        factor = float(m.group(3))
        severity = m.group(4) or ("page" if factor > 1.0 else "ticket")
        out.append(BurnWindow(long_s, short_s, factor, severity))
    return tuple(out)


@dataclass(frozen=True)
class ExportOptions:
    """Knobs of the exported configuration that the budget file does not hold."""

    prometheus_url: str = "http://prometheus.monitoring.svc:9090"
    """Where KEDA, Argo Rollouts and Flagger reach Prometheus."""
    verdict_url: str = "http://tailbudget.monitoring.svc:9464/v1/verdict"
    """`tailbudget serve`'s verdict endpoint, for Argo Rollouts' web metric."""
    namespace: str | None = None
    target_name: str | None = None
    """The Deployment KEDA scales (default: the budget's service name)."""
    target_kind: str = "Deployment"
    burn_windows: tuple[BurnWindow, ...] = DEFAULT_BURN_WINDOWS
    rule_interval_s: float | None = None
    """Rule group evaluation interval; default the policy's evaluate_every."""
    buckets_s: tuple[float, ...] | None = None
    """The histogram bucket bounds the service exports; default `latency_buckets`."""
    metrics: str = "tailbudget"
    """Whose histograms the rules read: tailbudget (the Measure layer's), vllm, sglang, tgi."""

    def __post_init__(self) -> None:

        check_url(self.prometheus_url, "prometheus_url")
        check_url(self.verdict_url, "verdict_url")
        if self.namespace is not None:
            check_label(self.namespace, "namespace", "Kubernetes namespace")
        if self.target_name is not None:
            check_subdomain(self.target_name, "scale_target", "Kubernetes object name")


_float_to_go: Callable[[float], str] = _client_utils.floatToGoString
"""How the Python client writes `le` (Go's float formatting), so our matchers agree."""

# ---- formatting --------------------------------------------------------------------

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
_PROM_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d|w)\Z")
_PROM_FACTORS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def promql_duration(seconds: float) -> str:
    """Seconds as a PromQL/Kubernetes duration: 60 -> '1m', 90 -> '90s', 0.5 -> '500ms'."""
    if seconds <= 0 or not math.isfinite(seconds):
        raise BudgetError(f"a duration must be > 0 s, got {seconds!r}")
    ms = round(seconds * 1000)
    if ms % 1000:
        return f"{ms}ms"
    whole = ms // 1000
    for unit, size in _UNITS:
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"  # pragma: no cover - the loop ends at size 1


def parse_promql_duration(text: str) -> float:
    """'5m' -> 300.0; the inverse of `promql_duration` for single-unit durations."""
    m = _PROM_DURATION.match(text.strip())
    if not m:
        raise BudgetError(f"duration must look like 5m, 1h or 3d, got {text!r}")
    return int(m.group(1)) * _PROM_FACTORS[m.group(2)]


def num(value: float) -> str:
    """A float for a config file: shortest round-trip text, no float noise (1.7999 -> 1.8)."""
    text = format(round(value, 9), ".12g")
    return text if "e" not in text else repr(round(value, 12))


def seconds(ms: float) -> float:
    """Milliseconds to seconds without float noise."""
    return round(ms / 1000.0, 9)


def le_label(bound_s: float) -> str:
    """A bucket bound as the Python client and Prometheus write the `le` label ('5.2', '1.0')."""
    return _float_to_go(bound_s)


def k8s_name(text: str, suffix: str = "") -> str:
    """A DNS-1123 name (lower case, digits, '-'; at most 63 characters)."""
    base = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "service"
    tail = f"-{suffix}" if suffix else ""
    return (base[: 63 - len(tail)].rstrip("-") + tail).strip("-")


def k8s_metadata(
    budget: Budget,
    options: ExportOptions,
    suffix: str,
    annotations: dict[str, str] | None = None,
) -> JsonDict:
    """A manifest's metadata: name, tailbudget labels, annotations if any, namespace if set."""
    metadata: JsonDict = {
        "name": k8s_name(budget.service, suffix),
        "labels": {
            "app.kubernetes.io/managed-by": "tailbudget",
            f"{LABEL_PREFIX}/service": k8s_name(budget.service),
        },
    }
    if annotations is not None:
        metadata["annotations"] = annotations
    if options.namespace:
        metadata["namespace"] = options.namespace
    return metadata


def sli_name(o: Objective) -> str:
    """The SLI's name in rule names: `p95` end to end, `ttft_p95`, `queue_p99_9`."""
    base = o.percentile if o.metric == "e2e" else f"{o.metric}_{o.percentile}"
    return re.sub(r"[^A-Za-z0-9_]", "_", base)


def camel(text: str) -> str:
    """'shed_load_p95' -> 'ShedLoadP95' (alert names)."""
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", text) if p)


def label_value(text: str) -> str:
    """Text as a PromQL double-quoted label value: `tailbudget._names.promql_string`, the
    one escaping every target's queries share (quotes, backslashes, template delimiters)."""
    return promql_string(text)


def template_text(text: str) -> str:
    """A name inside a Prometheus alert label or annotation (a Go template)."""
    return go_template_text(text)


class _Dumper(yaml.SafeDumper):
    """Safe dumper writing multi-line strings (PromQL) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(docs: Sequence[JsonValue], header: Iterable[str] = ()) -> str:
    """YAML documents (separated by ---) after a `#` comment header."""
    head = "".join(f"# {line}\n" if line else "#\n" for line in header)
    body = "---\n".join(
        yaml.dump(
            d,
            Dumper=_Dumper,
            sort_keys=False,
            default_flow_style=False,
            width=100,
            allow_unicode=True,
        )
        for d in docs
    )
    return head + body


def header(budget: Budget, target: str, notes: Iterable[str] = ()) -> list[str]:
    """The comment lines every YAML output starts with."""
    lines = [
        f"Generated by `{GENERATOR} --to {target}` from the budget of service {budget.service!r}.",
        "Edit the budget file and export again rather than editing this file.",
    ]
    notes = list(notes)
    if notes:
        lines.append("")
        lines.extend(f"NOTE: {n}" for n in notes)
    return lines


# ---- policy and buckets ------------------------------------------------------------


def policy_of(budget: Budget) -> Policy:
    """The budget's resolved policy (PolicyError on a bad `policy:` block)."""
    return resolve_policy(budget)


DEFAULT_LADDER_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


def budget_thresholds_s(budget: Budget) -> list[float]:
    """Every latency the budget names, in seconds: SLO and stage slices, LLM TTFT and total."""
    out = [seconds(v) for v in budget.objectives.e2e().values()]
    for _, stage in budget.stages():
        if stage.budget is not None:
            out.extend(seconds(v) for v in stage.budget.given().values())
        if stage.llm is not None:
            out.extend((seconds(stage.llm.ttft_ms), seconds(stage.llm.total_ms)))
    return out


def latency_buckets(budget: Budget) -> tuple[float, ...]:
    """Histogram bounds (s) for this budget: a 1-2.5-5 ladder plus every latency it names.

    The same bounds as the Measure layer's Prometheus sink (`budget_buckets`). The
    latency SLI counts requests at or under an SLO threshold through the bucket
    whose `le` equals it, so the service's histograms must have these bounds.
    """
    return tuple(sorted(set(DEFAULT_LADDER_S) | set(budget_thresholds_s(budget))))


def bucket_at_or_below(threshold_s: float, buckets: Sequence[float]) -> float | None:
    """The largest bound <= threshold (exact match preferred); None when none is."""
    below = [b for b in buckets if b <= threshold_s + 1e-12]
    return max(below) if below else None


# ---- recording-rule names (the contract between targets) ---------------------------


def window_tag(window_s: float) -> str:
    """'1m' for 60 s: the suffix of rule names computed over a window."""
    return promql_duration(window_s)


def stage_quantile_rule(p: str, window_s: float) -> str:
    """Per-stage percentile: labels service, stage."""
    return f"service_stage:{names.STAGE_DURATION}:{p}_rate{window_tag(window_s)}"


def request_quantile_rule(p: str, window_s: float) -> str:
    """End-to-end percentile: label service."""
    return f"service:{names.REQUEST_DURATION}:{p}_rate{window_tag(window_s)}"


def request_count_rule(window_s: float) -> str:
    """Requests seen over the window (the min_samples guard)."""
    return f"service:{names.REQUEST_DURATION}:count_increase{window_tag(window_s)}"


def error_ratio_rule(window_s: float) -> str:
    """Share of requests with outcome=error over the window."""
    return f"service:tailbudget_requests:error_ratio_rate{window_tag(window_s)}"


def error_lower_rule(window_s: float) -> str:
    """Wilson lower confidence bound of the error ratio over the window."""
    return f"service:tailbudget_requests:error_ratio_wilson_lower{window_tag(window_s)}"


def slow_ratio_rule(p: str, window_s: float) -> str:
    """Share of requests slower than the SLO at percentile p (the latency SLI's bad share)."""
    return f"service:{names.REQUEST_DURATION}:slow_ratio_{p}_rate{window_tag(window_s)}"


def quantile(p: str) -> float:
    """'p95' -> 0.95."""
    return quantile_of(p)


def wilson_lower_expr(p: str, n: str, z: float) -> str:
    """The lower bound of the continuity-corrected Wilson interval (Newcombe 1998, method 4).

    The same formula as `tailbudget.control.stats.wilson`, from the ratio p over n
    trials; 0 when there is no error (the `p > bool 0` factor).
    """
    z2 = num(z * z)
    root = f"clamp_min({z2} - 2 - 1 / {n} + 4 * {p} * ({n} * (1 - {p}) + 1), 0)"
    return (
        f"clamp_min((2 * {n} * {p} + {z2} - 1 - {num(z)} * sqrt({root})) "
        f"/ (2 * ({n} + {z2})), 0)\n* ({p} > bool 0)"
    )


def service_selector(budget: Budget) -> str:
    """`service="<name>"`."""
    return f'service="{label_value(budget.service)}"'


NATIVE_RULES = ("percentile", "error_rate", "p99_vs_baseline")


def native_rule(rule: Rule) -> str | None:
    """Which of tailbudget's own series a rule reads (`--metrics tailbudget`: end-to-end
    p50/p95/p99 and errors), or None for one they do not carry (ttft, goodput, stages)."""
    ref = rule.ref
    if ref.kind == "error_rate":
        return "error_rate"
    if ref.series != "e2e":
        return None
    if ref.kind == "quantile" and ref.percentile in PERCENTILES:
        return "percentile"
    if ref.kind == "vs_baseline" and ref.percentile == "p99":
        return "p99_vs_baseline"
    return None


def rule_words(rule: Rule) -> str:
    """A rule's condition as its metric reads: `ttft.p95 > 450 ms`, `p99 > 1.2x baseline`,
    `goodput < 0.9x baseline`, `error_rate > 0.01`."""
    ref = rule.ref
    if ref.latency:
        return f"{rule.metric} {rule.op} {num(rule.threshold)} ms"
    if ref.ratio_of_baseline:
        what = rule.metric.removesuffix("_vs_baseline")
        return f"{what} {rule.op} {num(rule.threshold)}x baseline"
    return f"{rule.metric} {rule.op} {num(rule.threshold)}"


def exported_kind(rule: Rule, target: str, notes: list[str]) -> str | None:
    """`native_rule`, with a note (`not_exported`) for a rule the `target` export leaves
    out."""
    kind = native_rule(rule)
    if kind is None:
        notes.append(not_exported(rule, target))
    return kind


def not_exported(rule: Rule, target: str) -> str:
    """The note for a rule tailbudget's own metrics cannot express."""
    ref = rule.ref
    carried = "the end-to-end duration (p50, p95, p99) and the error count"
    fix = (
        " (the metrics presets vllm and sglang carry ttft, tpot and itl)"
        if ref.series in ("ttft", "tpot", "itl")
        else ""
    )
    return (
        f"rule {rule.name!r} ({rule_words(rule)}) is not in this {target} export: "
        f"tailbudget's own metrics carry {carried} only; `tailbudget serve` still acts on "
        f"it{fix}."
    )
