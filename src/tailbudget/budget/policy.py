"""The control policy: rules as data, resolved against a budget's SLO.

A budget's `policy:` is `default` (the default reactive-scaling rules) or a block:

    policy:
      window: 60s            # rolling window the percentiles are computed over
      evaluate_every: 10s    # also the width of one sub-window of the ring
      min_samples: 20        # fewer requests in the window -> state "unknown"
      rollback_for: 2m       # default `for` of rollback rules (2m-5m)
      baseline_p99_ms: 900   # optional; without it the p99 rollback rule is inactive
      confidence: 0.975      # one-sided level of the Wilson / order-statistic bounds
      replicas: {min: 2, max: 20, step: 1}
      dry_run: false         # shadow mode: journal decisions, execute nothing
      rules:                 # omit to keep the default rules
        - {name: scale, metric: p95, op: ">", threshold: 90% of p95, action: scale_up,
           cooldown: 60s, clear: {threshold: 70% of p95, for: 3m}}

Thresholds are milliseconds for p50/p95/p99 (`1800`, `1800ms`, `1.8s`, or a share
of the SLO: `90% of p95`), a ratio for error_rate (`0.01`, `1%`, `100% of
error_rate`) and for p99_vs_baseline (`1.2`, `1.2x`, `120% of baseline`).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tailbudget._units import parse_duration_s
from tailbudget.budget.model import SLO, Budget
from tailbudget.errors import PolicyError, TailbudgetError

Metric = Literal["p50", "p95", "p99", "error_rate", "p99_vs_baseline"]
Action = Literal["scale_up", "trim_logging", "shed_load", "rollback"]
METRICS: tuple[str, ...] = ("p50", "p95", "p99", "error_rate", "p99_vs_baseline")
TRIGGER_ACTIONS: tuple[str, ...] = ("scale_up", "trim_logging", "shed_load", "rollback")
RECOVERY: dict[str, str | None] = {
    "scale_up": "scale_down",
    "trim_logging": "restore_logging",
    "shed_load": "stop_shedding",
    "rollback": None,
}
"""The action that undoes each trigger once its clear condition has held."""
ALL_ACTIONS: tuple[str, ...] = (
    "scale_up",
    "scale_down",
    "trim_logging",
    "restore_logging",
    "shed_load",
    "stop_shedding",
    "rollback",
)

# The default rules' numbers, stated for an SLO p95 of 2800 ms.
SEED_SLO_P95_MS = 2800.0
SEED_SCALE_UP_MS = 1800.0
SEED_TRIM_MS = 2800.0
SEED_SHED_MS = 3000.0
SEED_ERROR_RATE = 0.01
SEED_BASELINE_RATIO = 1.2

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Replicas(_Frozen):
    """Bounds and step of the desired replica count handed to the autoscaler."""

    min: Annotated[int, Field(ge=0)] = 1
    max: Annotated[int, Field(ge=1)] = 10
    step: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _bounds(self) -> Replicas:
        if self.max < self.min:
            raise ValueError(f"replicas.max ({self.max}) is below replicas.min ({self.min})")
        return self


class Rule(_Frozen):
    """One resolved rule: when `metric op threshold` holds for `for_s`, do `action`."""

    name: str
    metric: Metric
    op: Literal[">", ">="] = ">"
    threshold: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    """ms for p50/p95/p99; a ratio for error_rate and p99_vs_baseline."""
    for_s: Seconds = 0.0
    action: Action
    cooldown_s: Seconds = 60.0
    clear_threshold: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """Hysteresis: the trigger clears only when the metric is <= this."""
    clear_for_s: Seconds = 120.0
    """Stabilization: the clear condition must hold this long before recovery."""
    expr: str = ""
    """The threshold as written (e.g. '90% of p95'), for reports."""

    @model_validator(mode="after")
    def _hysteresis(self) -> Rule:
        if self.clear_threshold > self.threshold:
            raise ValueError(
                f"clear threshold ({self.clear_threshold:g}) must not exceed the trigger "
                f"threshold ({self.threshold:g}); lower clear.threshold"
            )
        return self

    def holds(self, value: float) -> bool:
        """Whether `value` meets the trigger condition."""
        return value > self.threshold if self.op == ">" else value >= self.threshold

    @property
    def unit(self) -> str:
        """'ms' for latency rules, '' for ratios."""
        return "ms" if self.metric in ("p50", "p95", "p99") else ""


MIN_EVALUATE_EVERY_S = 0.1
"""Shortest evaluation period (and sub-window) a policy may use."""


class Policy(_Frozen):
    """A whole resolved policy (see the module docstring for the file form)."""

    window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0
    evaluate_every_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 10.0
    min_samples: Annotated[int, Field(ge=1)] = 20
    baseline_p99_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    rollback_for_s: Seconds = 120.0
    confidence: Annotated[float, Field(ge=0.5, lt=1)] = 0.975
    rules: list[Rule] = Field(default_factory=list)
    dry_run: bool = False
    replicas: Replicas = Field(default_factory=Replicas)
    source: str = "default"
    """How the policy was made, for reports (e.g. 'default, scaled to slo.p95 = 2800 ms')."""

    @model_validator(mode="after")
    def _ring(self) -> Policy:
        if self.evaluate_every_s < MIN_EVALUATE_EVERY_S:
            raise ValueError(
                f"evaluate_every must be at least {MIN_EVALUATE_EVERY_S:g}s, got "
                f"{self.evaluate_every_s:g}s; percentiles over shorter spans hold too few "
                "requests to act on (the default is 10s)"
            )
        subs = self.window_s / self.evaluate_every_s
        if subs < 1 or abs(subs - round(subs)) > 1e-9 or round(subs) > 720:
            raise ValueError(
                f"window ({self.window_s:g}s) must be a whole multiple (1-720x) of "
                f"evaluate_every ({self.evaluate_every_s:g}s), e.g. window 60s, evaluate_every 10s"
            )
        names = [r.name for r in self.rules]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"rule name {dup!r} appears twice; names must be unique")
        return self

    @property
    def sub_windows(self) -> int:
        """Number of sub-windows in the ring."""
        return round(self.window_s / self.evaluate_every_s)

    def with_baseline(self, p99_ms: float | None) -> Policy:
        """This policy with another baseline p99 (None removes it)."""
        return self.model_copy(update={"baseline_p99_ms": p99_ms})


# ---- resolving the budget file's `policy:` -------------------------------------------

_NUM = r"(\d+(?:\.\d+)?)"
_SHARE = re.compile(rf"^{_NUM}\s*%\s*of\s*(?:the\s+)?(?:slo\.)?(p50|p95|p99|error_rate|baseline)$")
_PERCENT = re.compile(rf"^{_NUM}\s*%$")
_TIMES = re.compile(rf"^{_NUM}\s*x(?:\s*(?:the\s+)?baseline)?$")
_POLICY_KEYS = {
    "window",
    "evaluate_every",
    "min_samples",
    "rollback_for",
    "baseline_p99_ms",
    "confidence",
    "replicas",
    "dry_run",
    "rules",
}
_RULE_KEYS = {"name", "metric", "op", "threshold", "for", "action", "cooldown", "clear"}


def _slo_ms(slo: SLO | None, name: str, path: str) -> float:
    value = getattr(slo, name, None) if slo is not None else None
    if value is None:
        raise PolicyError(
            f"{path}: refers to slo.{name}, which the budget does not set; "
            f"add slo.{name} or write the threshold in ms"
        )
    return float(value)


def resolve_threshold(raw: Any, metric: str, slo: SLO | None, path: str) -> tuple[float, str]:
    """A threshold as written -> (resolved value, text); PolicyError naming `path`."""
    value, text = _threshold(raw, metric, slo, path)
    if not (value > 0 and math.isfinite(value)):
        raise PolicyError(f"{path}: must resolve to a positive finite number, got {raw!r}")
    return value, text


def _threshold(raw: Any, metric: str, slo: SLO | None, path: str) -> tuple[float, str]:
    latency = metric in ("p50", "p95", "p99")
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise PolicyError(f"{path}: must be a number or text like '90% of p95', got {raw!r}")
    if isinstance(raw, int | float):
        if not raw > 0 or raw != raw or raw == float("inf"):
            raise PolicyError(f"{path}: must be a positive number, got {raw!r}")
        return float(raw), f"{raw:g}{' ms' if latency else ''}"
    text = " ".join(raw.strip().lower().split())
    if m := _SHARE.match(text):
        share, ref = float(m.group(1)) / 100.0, m.group(2)
        if latency and ref in ("p50", "p95", "p99"):
            return share * _slo_ms(slo, ref, path), raw.strip()
        if metric == "error_rate" and ref == "error_rate":
            return share * _slo_ms(slo, "error_rate", path), raw.strip()
        if metric == "p99_vs_baseline" and ref == "baseline":
            return share, raw.strip()
        want = {
            True: "a latency percentile (e.g. '90% of p95')",
            False: "'100% of error_rate'" if metric == "error_rate" else "'120% of baseline'",
        }[latency]
        raise PolicyError(f"{path}: a {metric} threshold can be a share of {want}, got {raw!r}")
    if latency:
        try:
            ms = parse_duration_s(text if re.search(r"[a-z]$", text) else f"{text}ms") * 1000.0
        except TailbudgetError:
            raise PolicyError(
                f"{path}: a {metric} threshold is milliseconds (1800, '1.8s') or a share "
                f"of the SLO ('90% of p95'), got {raw!r}"
            ) from None
        if ms <= 0:
            raise PolicyError(f"{path}: must be above 0 ms, got {raw!r}")
        return ms, raw.strip()
    if m := _PERCENT.match(text):
        return float(m.group(1)) / 100.0, raw.strip()
    if metric == "p99_vs_baseline" and (m := _TIMES.match(text)):
        return float(m.group(1)), raw.strip()
    try:
        value = float(text)
    except ValueError:
        hint = "0.01 or '1%'" if metric == "error_rate" else "1.2, '1.2x' or '120% of baseline'"
        raise PolicyError(f"{path}: a {metric} threshold looks like {hint}, got {raw!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise PolicyError(f"{path}: must be a positive number, got {raw!r}")
    return value, raw.strip()


def _duration(raw: Any, path: str) -> float:
    try:
        return parse_duration_s(raw, field=path)
    except TailbudgetError as exc:
        raise PolicyError(str(exc)) from None


def default_clear(metric: str, threshold: float) -> float:
    """Hysteresis used when a rule gives no clear threshold."""
    if metric == "p99_vs_baseline":
        return 1.0 + (threshold - 1.0) / 2.0 if threshold > 1.0 else threshold
    if metric == "error_rate":
        return threshold / 2.0
    return threshold * 0.85


def default_rules(slo: SLO | None, rollback_for_s: float = 120.0) -> tuple[list[Rule], str]:
    """The default reactive-scaling rules, scaled to the SLO p95 when the budget has one."""
    p95 = slo.p95 if slo is not None else None
    scale = p95 / SEED_SLO_P95_MS if p95 is not None else 1.0
    err = slo.error_rate if slo is not None and slo.error_rate else SEED_ERROR_RATE
    up, trim, shed = (SEED_SCALE_UP_MS * scale, SEED_TRIM_MS * scale, SEED_SHED_MS * scale)
    if p95 is None:
        where = "default (rules for a 2800 ms p95 SLO)"
        exprs: tuple[str, ...] = ("1800 ms", "2800 ms", "3000 ms")
    else:
        where = f"default, scaled to slo.p95 = {p95:g} ms"
        exprs = tuple(f"{100 * v / p95:.1f}% of p95" for v in (up, trim, shed))

    def latency(name: str, t: float, expr: str, for_s: float, action: Action) -> Rule:
        return Rule(
            name=name,
            metric="p95",
            threshold=t,
            for_s=for_s,
            action=action,
            cooldown_s=60.0,
            clear_threshold=default_clear("p95", t),
            clear_for_s=120.0,
            expr=expr,
        )

    rules = [
        latency("scale_up_p95", up, exprs[0], 0.0, "scale_up"),
        latency("trim_logging_p95", trim, exprs[1], 120.0, "trim_logging"),
        latency("shed_load_p95", shed, exprs[2], 120.0, "shed_load"),
        Rule(
            name="rollback_error_rate",
            metric="error_rate",
            threshold=err,
            for_s=rollback_for_s,
            action="rollback",
            cooldown_s=600.0,
            clear_threshold=default_clear("error_rate", err),
            clear_for_s=120.0,
            expr=f"{err:g}",
        ),
        Rule(
            name="rollback_p99_baseline",
            metric="p99_vs_baseline",
            threshold=SEED_BASELINE_RATIO,
            for_s=rollback_for_s,
            action="rollback",
            cooldown_s=600.0,
            clear_threshold=default_clear("p99_vs_baseline", SEED_BASELINE_RATIO),
            clear_for_s=120.0,
            expr="1.2x baseline",
        ),
    ]
    return rules, where


def _rule(raw: Any, i: int, slo: SLO | None, rollback_for_s: float) -> Rule:
    path = f"policy.rules[{i}]"
    if not isinstance(raw, dict):
        raise PolicyError(
            f"{path}: each rule is a mapping with metric, threshold and action, got {raw!r}"
        )
    extra = sorted(set(raw) - _RULE_KEYS)
    if extra:
        raise PolicyError(
            f"{path}.{extra[0]}: unknown key; a rule has {', '.join(sorted(_RULE_KEYS))}"
        )
    for key in ("metric", "threshold", "action"):
        if key not in raw:
            raise PolicyError(f"{path}.{key}: is required")
    metric = raw["metric"]
    if metric not in METRICS:
        raise PolicyError(f"{path}.metric: must be one of {', '.join(METRICS)}, got {metric!r}")
    action = raw["action"]
    if action not in TRIGGER_ACTIONS:
        hint = ""
        if action in ALL_ACTIONS:
            hint = " (recovery actions follow automatically once the rule's clear condition holds)"
        raise PolicyError(
            f"{path}.action: must be one of {', '.join(TRIGGER_ACTIONS)}{hint}, got {action!r}"
        )
    op = raw.get("op", ">")
    if op not in (">", ">="):
        raise PolicyError(f"{path}.op: must be '>' or '>=', got {op!r}")
    threshold, expr = resolve_threshold(raw["threshold"], metric, slo, f"{path}.threshold")
    default_for = rollback_for_s if action == "rollback" else 0.0
    for_s = _duration(raw.get("for", default_for), f"{path}.for")
    cooldown_s = _duration(raw.get("cooldown", 60.0), f"{path}.cooldown")
    clear = raw.get("clear", {})
    if not isinstance(clear, dict) or set(clear) - {"threshold", "for"}:
        raise PolicyError(
            f"{path}.clear: must be a mapping with threshold and/or for, got {clear!r}"
        )
    if "threshold" in clear:
        clear_t, _ = resolve_threshold(clear["threshold"], metric, slo, f"{path}.clear.threshold")
    else:
        clear_t = default_clear(metric, threshold)
    if clear_t > threshold:
        raise PolicyError(
            f"{path}.clear.threshold: {clear_t:g} is above the trigger threshold "
            f"{threshold:g}; hysteresis needs clear <= threshold"
        )
    clear_for = _duration(clear.get("for", max(for_s, 120.0)), f"{path}.clear.for")
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


def parse_policy(spec: str | dict[str, Any] | None, slo: SLO | None = None) -> Policy:
    """Resolve a `policy:` value ('default' or a block) against an SLO (may be None)."""
    if spec is None or spec == "default":
        rules, source = default_rules(slo)
        return Policy(rules=rules, source=source)
    if not isinstance(spec, dict):
        raise PolicyError(f"policy: must be 'default' or a mapping of settings, got {spec!r}")
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
    if "rules" in spec:
        raw_rules = spec["rules"]
        if not isinstance(raw_rules, list) or not raw_rules:
            raise PolicyError(
                "policy.rules: must be a non-empty list of rules (omit it for the defaults)"
            )
        rules = [_rule(r, i, slo, rollback_for) for i, r in enumerate(raw_rules)]
        source = "budget file rules"
    else:
        rules, source = default_rules(slo, rollback_for)
    try:
        return Policy(
            window_s=window,
            evaluate_every_s=every,
            min_samples=min_samples,
            baseline_p99_ms=float(baseline) if baseline is not None else None,
            rollback_for_s=rollback_for,
            confidence=float(confidence),
            rules=rules,
            dry_run=dry_run,
            replicas=Replicas(**replicas_raw),
            source=source,
        )
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise PolicyError(f"policy{'.' + where if where else ''}: {msg}") from None


def resolve_policy(budget: Budget | None) -> Policy:
    """The budget's policy, resolved ('default' or its block); the seed default when None."""
    if budget is None:
        return parse_policy("default")
    return parse_policy(budget.policy, budget.slo)


__all__ = [
    "ALL_ACTIONS",
    "METRICS",
    "RECOVERY",
    "TRIGGER_ACTIONS",
    "Policy",
    "Replicas",
    "Rule",
    "default_rules",
    "parse_policy",
    "resolve_policy",
    "resolve_threshold",
]
