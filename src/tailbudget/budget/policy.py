"""The control policy: rules as data, resolved against a budget's SLO.

A budget's `policy:` is `default` (the default reactive-scaling rules), `model`
(replicas from the fitted service model, the default rules as its guard) or a block:

    policy:
      window: 60s            # rolling window the percentiles are computed over
      evaluate_every: 10s    # also the width of one sub-window of the ring
      min_samples: 20        # fewer requests in the window -> state "unknown"
      rollback_for: 2m       # default `for` of rollback rules (2m-5m)
      baseline_p99_ms: 900   # optional; without it the p99 rollback rule is inactive
      confidence: 0.975      # one-sided level of the Wilson / order-statistic bounds
      replicas: {min: 2, max: 20, step: 1}
      dry_run: false         # shadow mode: journal decisions, execute nothing
      mode: model            # reactive (default): rules scale; model: see ModelMode
      model: {headroom: 0.1, cooldown: 5m, drift_error: 0.25, drift_for: 2m}
      rules:                 # omit to keep the default rules
        - {name: scale, metric: p95, op: ">", threshold: 90% of p95, action: scale_up,
           cooldown: 60s, clear: {threshold: 70% of p95, for: 3m}}

A rule's `metric` is any name `tailbudget.budget.metric` parses: `p95`,
`e2e.p99.9`, `ttft.p95`, `tpot.p99`, `itl.p99`, `<stage>.p99`, `error_rate`,
`goodput`, and the `_vs_baseline` forms. Thresholds are milliseconds for
percentiles (`1800`, `1800ms`, `1.8s`, or a share of an objective: `90% of p95`,
`90% of ttft.p95`), a ratio for error_rate (`0.01`, `1%`, `100% of error_rate`)
and goodput (`0.95`, `95%`, `100% of goodput`), and a ratio of the baseline for
the `_vs_baseline` metrics (`1.2`, `1.2x`, `120% of baseline`). Goodput rules
use `op: "<"` (a fall is the breach) and clear at or above their clear threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from tailbudget._units import parse_duration_s
from tailbudget.budget.default_policy import (
    default_clear,
    default_rules,
    llm_default_rules,
    ttft_objective,
)
from tailbudget.budget.metric import MetricRef, parse_metric
from tailbudget.budget.model import SLO, Budget
from tailbudget.budget.objectives import Objectives
from tailbudget.budget.policy_model import (
    ALL_ACTIONS,
    METRICS,
    RECOVERY,
    TRIGGER_ACTIONS,
    ModelMode,
    Policy,
    Replicas,
    Rule,
)
from tailbudget.budget.thresholds import TargetTable, resolve_threshold, slo_targets
from tailbudget.errors import PolicyError, TailbudgetError

# ---- resolving the budget file's `policy:` -------------------------------------------

_POLICY_KEYS = {
    "window",
    "evaluate_every",
    "min_samples",
    "rollback_for",
    "baseline_p99_ms",
    "baselines",
    "confidence",
    "replicas",
    "dry_run",
    "rules",
    "mode",
    "model",
}
_MODEL_KEYS = {
    "probability",
    "headroom",
    "cooldown",
    "alpha",
    "beta",
    "mix_window",
    "peak_window",
    "peak_span",
    "surge",
    "drift_error",
    "drift_for",
    "min_samples",
    "refit_every",
}
_MODEL_DURATIONS = {
    "cooldown",
    "mix_window",
    "peak_window",
    "peak_span",
    "drift_for",
    "refit_every",
}


def _model_mode(raw: object) -> ModelMode:
    """The `model:` block of a policy (durations as 5m / 300s, the rest numbers)."""
    if raw is None:
        return ModelMode()
    if not isinstance(raw, dict):
        raise PolicyError(f"policy.model: must be a mapping of settings, got {raw!r}")
    extra = sorted(set(raw) - _MODEL_KEYS)
    if extra:
        raise PolicyError(
            f"policy.model.{extra[0]}: unknown key; the model block has "
            f"{', '.join(sorted(_MODEL_KEYS))}"
        )
    values = {
        (f"{k}_s" if k in _MODEL_DURATIONS else k): (
            _duration(v, f"policy.model.{k}") if k in _MODEL_DURATIONS else v
        )
        for k, v in raw.items()
    }
    try:
        return ModelMode(**values)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]).removesuffix("_s")
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise PolicyError(f"policy.model.{where}: {msg}, got {raw.get(where)!r}") from None


_RULE_KEYS = {"name", "metric", "op", "threshold", "for", "action", "cooldown", "clear"}


def _duration(raw: object, path: str) -> float:
    try:
        return parse_duration_s(raw, field=path)
    except TailbudgetError as exc:
        raise PolicyError(str(exc)) from None


def _rule_head(raw: dict[str, Any], path: str) -> tuple[MetricRef, str, str]:
    """A rule's keys checked; its metric, action and comparison."""
    extra = sorted(set(raw) - _RULE_KEYS)
    if extra:
        raise PolicyError(
            f"{path}.{extra[0]}: unknown key; a rule has {', '.join(sorted(_RULE_KEYS))}"
        )
    for key in ("metric", "threshold", "action"):
        if key not in raw:
            raise PolicyError(f"{path}.{key}: is required")
    try:
        ref = parse_metric(raw["metric"])
    except PolicyError as exc:
        raise PolicyError(f"{path}.metric: {exc}") from None
    metric = ref.name
    action = raw["action"]
    if action not in TRIGGER_ACTIONS:
        hint = ""
        if action in ALL_ACTIONS:
            hint = " (recovery actions follow automatically once the rule's clear condition holds)"
        raise PolicyError(
            f"{path}.action: must be one of {', '.join(TRIGGER_ACTIONS)}{hint}, got {action!r}"
        )
    ops = (">", ">=") if ref.higher_is_worse else ("<", "<=")
    op = raw.get("op", ops[0])
    if op not in ops:
        raise PolicyError(f"{path}.op: a {metric} rule takes {ops[0]!r} or {ops[1]!r}, got {op!r}")
    return ref, action, op


def _clear(
    raw: dict[str, Any],
    path: str,
    ref: MetricRef,
    threshold: float,
    for_s: float,
    targets: TargetTable,
) -> tuple[float, float]:
    """A rule's clear threshold (hysteresis on the right side of its trigger) and duration."""
    metric = ref.name
    clear = raw.get("clear", {})
    if not isinstance(clear, dict) or set(clear) - {"threshold", "for"}:
        raise PolicyError(
            f"{path}.clear: must be a mapping with threshold and/or for, got {clear!r}"
        )
    if "threshold" in clear:
        clear_t, _ = resolve_threshold(
            clear["threshold"], metric, targets, f"{path}.clear.threshold"
        )
    else:
        clear_t = default_clear(metric, threshold)
    if ref.higher_is_worse and clear_t > threshold:
        raise PolicyError(
            f"{path}.clear.threshold: {clear_t:g} is above the trigger threshold "
            f"{threshold:g}; hysteresis needs clear <= threshold"
        )
    if not ref.higher_is_worse and clear_t < threshold:
        raise PolicyError(
            f"{path}.clear.threshold: {clear_t:g} is below the trigger threshold "
            f"{threshold:g}; a falling metric clears at or above its threshold"
        )
    clear_for = _duration(clear.get("for", max(for_s, 120.0)), f"{path}.clear.for")
    return clear_t, clear_for


def _rule(raw: object, i: int, targets: TargetTable, rollback_for_s: float) -> Rule:
    path = f"policy.rules[{i}]"
    if not isinstance(raw, dict):
        raise PolicyError(
            f"{path}: each rule is a mapping with metric, threshold and action, got {raw!r}"
        )
    ref, action, op = _rule_head(raw, path)
    metric = ref.name
    threshold, expr = resolve_threshold(raw["threshold"], metric, targets, f"{path}.threshold")
    default_for = rollback_for_s if action == "rollback" else 0.0
    for_s = _duration(raw.get("for", default_for), f"{path}.for")
    cooldown_s = _duration(raw.get("cooldown", 60.0), f"{path}.cooldown")
    clear_t, clear_for = _clear(raw, path, ref, threshold, for_s, targets)
    name = raw.get("name", f"{action}_{metric}")
    if not isinstance(name, str) or not name.strip():
        raise PolicyError(f"{path}.name: must be a non-empty text, got {name!r}")
    return Rule(
        name=name.strip(),
        metric=metric,
        op=op,
        threshold=threshold,
        for_s=for_s,
        action=action,
        cooldown_s=cooldown_s,
        clear_threshold=clear_t,
        clear_for_s=clear_for,
        expr=expr,
    )


def _defaults(
    slo: Objectives | None, targets: TargetTable, rollback_for_s: float = 120.0
) -> tuple[list[Rule], str]:
    if ttft_objective(targets) is not None:
        gated = None if slo is None else {parse_metric(o.key).name for o in slo if o.gated}
        return llm_default_rules(targets, rollback_for_s, gated)
    return default_rules(slo, rollback_for_s)


def parse_baselines(raw: object, where: str = "policy.baselines") -> dict[str, float]:
    """{metric: baseline} (`ttft.p99`: ms, `goodput`: a share), checked against `where`."""
    if not isinstance(raw, dict):
        raise PolicyError(
            f"{where}: must be a mapping of metric to value, e.g. "
            f"{{ttft.p99: 400, goodput: 0.97}}, got {raw!r}"
        )
    out: dict[str, float] = {}
    for key, value in raw.items():
        try:
            ref = parse_metric(str(key))
        except PolicyError as exc:
            raise PolicyError(f"{where}.{key}: {exc}") from None
        if ref.kind not in ("quantile", "goodput"):
            raise PolicyError(
                f"{where}.{key}: a baseline is a percentile (ms) or goodput (a share)"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise PolicyError(f"{where}.{key}: must be a positive number, got {value!r}")
        if ref.kind == "goodput" and value > 1:
            raise PolicyError(f"{where}.{key}: a goodput share is in (0, 1], got {value!r}")
        out[ref.name] = float(value)
    return out


def _settings(spec: dict[str, Any]) -> tuple[int, float | None, float, bool, dict[str, int]]:
    """The policy block's scalar settings and replica bounds, each checked."""
    min_samples = spec.get("min_samples", 20)
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise PolicyError(f"policy.min_samples: must be a whole number >= 1, got {min_samples!r}")
    baseline = spec.get("baseline_p99_ms")
    if baseline is not None and (
        isinstance(baseline, bool) or not isinstance(baseline, int | float) or not baseline > 0
    ):
        raise PolicyError(
            f"policy.baseline_p99_ms: must be a positive number of ms, got {baseline!r}"
        )
    confidence = spec.get("confidence", 0.975)
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not (0.5 <= confidence < 1)
    ):
        raise PolicyError(f"policy.confidence: must be in [0.5, 1), e.g. 0.975, got {confidence!r}")
    dry_run = spec.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise PolicyError(f"policy.dry_run: must be true or false, got {dry_run!r}")
    replicas_raw = spec.get("replicas", {})
    if not isinstance(replicas_raw, dict) or set(replicas_raw) - {"min", "max", "step"}:
        raise PolicyError(
            f"policy.replicas: must be a mapping with min, max and step, got {replicas_raw!r}"
        )
    for key, value in replicas_raw.items():
        least = 0 if key == "min" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise PolicyError(
                f"policy.replicas.{key}: must be a whole number >= {least}, got {value!r}"
            )
    return min_samples, baseline, confidence, dry_run, replicas_raw


def _default_sizing(table: TargetTable) -> Literal["step", "breach"]:
    """The LLM default sizes its scale-ups from the breach (see Policy.sizing); written
    rules and the end-to-end default keep their stated step."""
    return "breach" if ttft_objective(table) is not None else "step"


def parse_policy(
    spec: str | dict[str, Any] | None,
    slo: SLO | Objectives | None = None,
    *,
    targets: TargetTable | None = None,
    goodput: Mapping[str, float] | None = None,
) -> Policy:
    """Resolve a `policy:` value ('default' or a block) against the budget's objectives.

    `targets` adds objective targets by metric name (`ttft.p95: 1200`) to the flat
    SLO's; a ttft objective makes the default the LLM default. `goodput` holds the
    per-request thresholds (ms by series) a good request meets.
    """
    objectives = None if slo is None else Objectives.coerce(slo)
    table = {**slo_targets(objectives), **dict(targets or {})}
    good = {k: float(v) for k, v in (goodput or {}).items()}
    if spec is None or spec in ("default", "model"):
        rules, source = _defaults(objectives, table)
        mode = "model" if spec == "model" else "reactive"
        return Policy(
            rules=rules, source=source, goodput=good, mode=mode, sizing=_default_sizing(table)
        )
    if not isinstance(spec, dict):
        raise PolicyError(
            f"policy: must be 'default', 'model' or a mapping of settings, got {spec!r}"
        )
    extra = sorted(set(spec) - _POLICY_KEYS)
    if extra:
        raise PolicyError(
            f"policy.{extra[0]}: unknown key; the policy block has "
            f"{', '.join(sorted(_POLICY_KEYS))}"
        )
    window = _duration(spec.get("window", 60.0), "policy.window")
    every = _duration(spec.get("evaluate_every", 10.0), "policy.evaluate_every")
    rollback_for = _duration(spec.get("rollback_for", 120.0), "policy.rollback_for")
    if not 120.0 <= rollback_for <= 300.0:
        raise PolicyError(
            f"policy.rollback_for: must be between 2m and 5m, got {spec.get('rollback_for')!r}"
        )
    min_samples, baseline, confidence, dry_run, replicas_raw = _settings(spec)
    if "rules" in spec:
        raw_rules = spec["rules"]
        if not isinstance(raw_rules, list) or not raw_rules:
            raise PolicyError(
                "policy.rules: must be a non-empty list of rules (omit it for the defaults)"
            )
        rules = [_rule(r, i, table, rollback_for) for i, r in enumerate(raw_rules)]
        source = "budget file rules"
    else:
        rules, source = _defaults(objectives, table, rollback_for)
    sizing = _default_sizing(table) if "rules" not in spec else "step"
    baselines = parse_baselines(spec.get("baselines", {}))
    mode = spec.get("mode", "reactive")
    if mode not in ("reactive", "model"):
        raise PolicyError(f"policy.mode: must be reactive or model, got {mode!r}")
    try:
        return Policy(
            window_s=window,
            evaluate_every_s=every,
            min_samples=min_samples,
            baseline_p99_ms=float(baseline) if baseline is not None else None,
            baselines=baselines,
            goodput=good,
            rollback_for_s=rollback_for,
            confidence=float(confidence),
            rules=rules,
            dry_run=dry_run,
            replicas=Replicas(**replicas_raw),
            mode=mode,
            sizing=sizing,
            model=_model_mode(spec.get("model")),
            source=source,
        )
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise PolicyError(f"policy{'.' + where if where else ''}: {msg}") from None


def objective_targets(objectives: Objectives) -> tuple[dict[str, float], dict[str, float]]:
    """(targets by metric name, goodput's per-request thresholds) of a budget's objectives."""
    targets = {parse_metric(o.key).name: float(o.target_ms) for o in objectives}
    if objectives.error_rate is not None:
        targets["error_rate"] = float(objectives.error_rate)
    if objectives.goodput is not None and objectives.goodput.min is not None:
        targets["goodput"] = float(objectives.goodput.min)
    return targets, dict(objectives.thresholds())


def resolve_policy(budget: Budget | None) -> Policy:
    """The budget's policy, resolved ('default' or its block); the seed default when None.

    Every objective of the budget (`ttft.p95`, `tpot.p99`, a stage) is a target a
    threshold may be a share of; a ttft objective makes the default the LLM default.
    """
    if budget is None:
        return parse_policy("default")
    return policy_for(budget.policy, budget.objectives)


def policy_for(spec: str | dict[str, Any] | None, objectives: Objectives | None) -> Policy:
    """A `policy:` value resolved against objectives: what `resolve_policy` does with a
    budget's, and what `simulate`/`capacity` do with `--slo` alone (no file), so the same
    objectives get the same rules in replay, serve and the simulator."""
    if objectives is None:
        return parse_policy(spec)
    targets, goodput = objective_targets(objectives)
    return parse_policy(spec, objectives, targets=targets, goodput=goodput)


__all__ = [
    "ALL_ACTIONS",
    "METRICS",
    "RECOVERY",
    "TRIGGER_ACTIONS",
    "Policy",
    "Replicas",
    "Rule",
    "default_rules",
    "llm_default_rules",
    "objective_targets",
    "parse_baselines",
    "parse_policy",
    "policy_for",
    "resolve_policy",
    "resolve_threshold",
    "slo_targets",
]
