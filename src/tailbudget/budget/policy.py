"""The control policy: rules as data, resolved against a budget's SLO.

A budget's `policy:` is `default` (the seed framework's policy) or a block:

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

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tailbudget._units import parse_duration_s
from tailbudget.budget.metric import MetricRef, parse_metric
from tailbudget.budget.model import SLO, Budget
from tailbudget.budget.objectives import Objectives
from tailbudget.errors import PolicyError, TailbudgetError

Action = Literal["scale_up", "trim_logging", "shed_load", "rollback"]
METRICS: tuple[str, ...] = ("p50", "p95", "p99", "error_rate", "p99_vs_baseline")
"""The end-to-end metrics; any name `parse_metric` accepts is a metric too."""
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

# The seed framework's numbers, stated for an SLO p95 of 2800 ms.
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
    metric: str
    """A metric name (`p95`, `ttft.p95`, `goodput`, ...), stored in canonical form."""
    op: Literal[">", ">=", "<", "<="] = ">"
    threshold: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    """ms for percentiles; a ratio for error_rate, goodput and the _vs_baseline metrics."""
    for_s: Seconds = 0.0
    action: Action
    cooldown_s: Seconds = 60.0
    clear_threshold: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """Hysteresis: the trigger clears only when the metric is <= this."""
    clear_for_s: Seconds = 120.0
    """Stabilization: the clear condition must hold this long before recovery."""
    expr: str = ""
    """The threshold as written (e.g. '90% of p95'), for reports."""

    @field_validator("metric", mode="before")
    @classmethod
    def _canonical(cls, value: Any) -> str:
        try:
            return parse_metric(value).name
        except PolicyError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _hysteresis(self) -> Rule:
        if self.rising and self.op[0] != ">":
            raise ValueError(f"a {self.metric} rule breaches upwards; use op '>' or '>='")
        if not self.rising and self.op[0] != "<":
            raise ValueError(f"a {self.metric} rule breaches when it falls; use op '<' or '<='")
        if self.rising and self.clear_threshold > self.threshold:
            raise ValueError(
                f"clear threshold ({self.clear_threshold:g}) must not exceed the trigger "
                f"threshold ({self.threshold:g}); lower clear.threshold"
            )
        if not self.rising and self.clear_threshold < self.threshold:
            raise ValueError(
                f"clear threshold ({self.clear_threshold:g}) must not be below the trigger "
                f"threshold ({self.threshold:g}) of a falling metric; raise clear.threshold"
            )
        return self

    @property
    def ref(self) -> MetricRef:
        """The parsed metric."""
        return parse_metric(self.metric)

    @property
    def rising(self) -> bool:
        """True when a higher value is worse (every metric but goodput)."""
        return self.ref.higher_is_worse

    def holds(self, value: float) -> bool:
        """Whether `value` meets the trigger condition."""
        op = self.op
        if op == ">":
            return value > self.threshold
        if op == ">=":
            return value >= self.threshold
        if op == "<":
            return value < self.threshold
        return value <= self.threshold

    def cleared(self, value: float) -> bool:
        """Whether `value` is on the healthy side of the clear threshold (hysteresis)."""
        if self.rising:
            return value <= self.clear_threshold
        return value >= self.clear_threshold

    @property
    def unit(self) -> str:
        """'ms' for latency rules, '' for ratios."""
        return "ms" if self.ref.latency else ""


class Policy(_Frozen):
    """A whole resolved policy (see the module docstring for the file form)."""

    window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0
    evaluate_every_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 10.0
    min_samples: Annotated[int, Field(ge=1)] = 20
    baseline_p99_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    baselines: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    """Baselines of other metrics by name (`ttft.p99`: ms, `goodput`: a share)."""
    goodput: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    """Per-request thresholds (ms) a good request meets, by series (`ttft`, `tpot`, `e2e`)."""
    rollback_for_s: Seconds = 120.0
    confidence: Annotated[float, Field(ge=0.5, lt=1)] = 0.975
    rules: list[Rule] = Field(default_factory=list)
    dry_run: bool = False
    replicas: Replicas = Field(default_factory=Replicas)
    source: str = "default"
    """How the policy was made, for reports (e.g. 'default, scaled to slo.p95 = 2800 ms')."""

    @model_validator(mode="after")
    def _ring(self) -> Policy:
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

    def baseline(self, name: str) -> float | None:
        """The baseline of metric `name` (`p99`, `ttft.p99`, `goodput`), or None."""
        if name == "p99":
            return self.baseline_p99_ms
        return self.baselines.get(name)

    @property
    def series(self) -> dict[str, set[float]]:
        """Series the rules read (`e2e`, `ttft`, a stage) and the quantiles of each."""
        out: dict[str, set[float]] = {}
        for rule in self.rules:
            ref = rule.ref
            if ref.q is not None:
                out.setdefault(ref.series, set()).add(ref.q)
        return out


# ---- resolving the budget file's `policy:` -------------------------------------------

_NUM = r"(\d+(?:\.\d+)?)"
_SHARE = re.compile(rf"^{_NUM}\s*%\s*of\s*(?:the\s+)?(?:slo\.)?(\S+)$")
_PERCENT = re.compile(rf"^{_NUM}\s*%$")
_TIMES = re.compile(rf"^{_NUM}\s*x(?:\s*(?:the\s+)?baseline)?$")
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
}
_RULE_KEYS = {"name", "metric", "op", "threshold", "for", "action", "cooldown", "clear"}


Targets = Mapping[str, float]
"""Objective targets by canonical metric name (`p95`, `ttft.p95`, `error_rate`, `goodput`)."""


def slo_targets(slo: SLO | None) -> dict[str, float]:
    """The flat SLO's targets by metric name."""
    if slo is None:
        return {}
    out = {k: float(v) for k in ("p50", "p95", "p99") if (v := getattr(slo, k, None)) is not None}
    if slo.error_rate is not None:
        out["error_rate"] = float(slo.error_rate)
    return out


def _target(targets: Targets, name: str, path: str) -> float:
    value = targets.get(name)
    if value is None:
        raise PolicyError(
            f"{path}: refers to slo.{name}, which the budget does not set; "
            f"add slo.{name} or write the threshold as a number"
        )
    return float(value)


def resolve_threshold(
    raw: Any, metric: str, targets: Targets | SLO | None, path: str
) -> tuple[float, str]:
    """A threshold as written -> (resolved value, text); PolicyError naming `path`."""
    table = targets if isinstance(targets, Mapping) else slo_targets(targets)
    ref = parse_metric(metric)
    value, text = _threshold(raw, ref, table, path)
    if not (value > 0 and math.isfinite(value)):
        raise PolicyError(f"{path}: must resolve to a positive finite number, got {raw!r}")
    return value, text


def _share_of(share: float, ref: MetricRef, other: str, targets: Targets, path: str) -> float:
    if ref.ratio_of_baseline:
        if other == "baseline":
            return share
        want = "'120% of baseline'" if ref.higher_is_worse else "'95% of baseline'"
    else:
        try:
            target = parse_metric(other)
        except PolicyError:
            target = None
        if target is not None and target.kind == ref.kind:
            return share * _target(targets, target.name, path)
        want = {
            "quantile": "a latency percentile (e.g. '90% of p95', '90% of ttft.p95')",
            "error_rate": "'100% of error_rate'",
            "goodput": "'100% of goodput'",
        }[ref.kind]
    raise PolicyError(f"{path}: a {ref.name} threshold can be a share of {want}, got {other!r}")


def _threshold(raw: Any, ref: MetricRef, targets: Targets, path: str) -> tuple[float, str]:
    latency = ref.latency
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise PolicyError(f"{path}: must be a number or text like '90% of p95', got {raw!r}")
    if isinstance(raw, int | float):
        if not raw > 0 or raw != raw or raw == float("inf"):
            raise PolicyError(f"{path}: must be a positive number, got {raw!r}")
        return float(raw), f"{raw:g}{' ms' if latency else ''}"
    text = " ".join(raw.strip().lower().split())
    if m := _SHARE.match(text):
        share = float(m.group(1)) / 100.0
        other = raw.strip().split()[-1].removeprefix("slo.")
        return _share_of(share, ref, other, targets, path), raw.strip()
    if latency:
        try:
            ms = parse_duration_s(text if re.search(r"[a-z]$", text) else f"{text}ms") * 1000.0
        except TailbudgetError:
            raise PolicyError(
                f"{path}: a {ref.name} threshold is milliseconds (1800, '1.8s') or a share "
                f"of an objective ('90% of {ref.name}'), got {raw!r}"
            ) from None
        if ms <= 0:
            raise PolicyError(f"{path}: must be above 0 ms, got {raw!r}")
        return ms, raw.strip()
    if m := _PERCENT.match(text):
        return float(m.group(1)) / 100.0, raw.strip()
    if ref.ratio_of_baseline and (m := _TIMES.match(text)):
        return float(m.group(1)), raw.strip()
    try:
        value = float(text)
    except ValueError:
        hint = "1.2, '1.2x' or '120% of baseline'" if ref.ratio_of_baseline else "0.01 or '1%'"
        raise PolicyError(
            f"{path}: a {ref.name} threshold looks like {hint}, got {raw!r}"
        ) from None
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
    kind = parse_metric(metric).kind
    if kind == "vs_baseline":
        return 1.0 + (threshold - 1.0) / 2.0 if threshold > 1.0 else threshold
    if kind in ("goodput", "goodput_vs_baseline"):
        return threshold + (1.0 - threshold) / 2.0 if threshold < 1.0 else threshold
    if kind == "error_rate":
        return threshold / 2.0
    return threshold * 0.85


def default_rules(slo: SLO | None, rollback_for_s: float = 120.0) -> tuple[list[Rule], str]:
    """The seed framework's rules, scaled to the SLO p95 when the budget has one."""
    p95 = slo.p95 if slo is not None else None
    scale = p95 / SEED_SLO_P95_MS if p95 is not None else 1.0
    err = slo.error_rate if slo is not None and slo.error_rate else SEED_ERROR_RATE
    up, trim, shed = (SEED_SCALE_UP_MS * scale, SEED_TRIM_MS * scale, SEED_SHED_MS * scale)
    if p95 is None:
        where = "default (seed framework)"
        exprs: tuple[str, ...] = ("1800 ms", "2800 ms", "3000 ms")
    else:
        where = f"default (seed framework), scaled to slo.p95 = {p95:g} ms"
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
        _error_rule(err, rollback_for_s),
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


def _error_rule(err: float, rollback_for_s: float) -> Rule:
    return Rule(
        name="rollback_error_rate",
        metric="error_rate",
        threshold=err,
        for_s=rollback_for_s,
        action="rollback",
        cooldown_s=600.0,
        clear_threshold=default_clear("error_rate", err),
        clear_for_s=120.0,
        expr=f"{err:g}",
    )


LLM_SCALE_SHARE = 0.9
"""The LLM default scales up when ttft passes this share of its target."""


def _ttft_objective(targets: Targets) -> str | None:
    """`ttft.p95` when the budget sets it, else the ttft objective at the highest percentile."""
    found = [parse_metric(k) for k in targets if k.startswith("ttft.p")]
    if not found:
        return None
    if any(r.q == 0.95 for r in found):
        return "ttft.p95"
    return max(found, key=lambda r: r.q or 0.0).name


def llm_default_rules(targets: Targets, rollback_for_s: float = 120.0) -> tuple[list[Rule], str]:
    """The LLM default: TTFT is the queueing signal (see docs/act-llm.md).

    scale_up when the ttft percentile passes 90% of its target; shed_load when it
    stays over the target for 2m; rollback when goodput is significantly below the
    baseline's (the Wilson upper bound under it), ttft.p99 exceeds 1.2x its baseline
    for `rollback_for`, or the error rate exceeds its objective (1% without one).
    """
    metric = _ttft_objective(targets)
    if metric is None:
        raise PolicyError("the LLM default policy needs a ttft objective (slo: ttft: {p95: ms})")
    target = float(targets[metric])
    up = LLM_SCALE_SHARE * target
    err = targets.get("error_rate") or SEED_ERROR_RATE

    def rule(name: str, metric: str, t: float, expr: str, **kw: Any) -> Rule:
        base = {"cooldown_s": 60.0, "clear_for_s": 120.0, "for_s": 0.0}
        return Rule(
            name=name,
            metric=metric,
            threshold=t,
            expr=expr,
            clear_threshold=default_clear(metric, t),
            **{**base, **kw},
        )

    rollback = {"for_s": rollback_for_s, "action": "rollback", "cooldown_s": 600.0}
    rules = [
        rule(f"scale_up_{metric}", metric, up, f"90% of {metric}", action="scale_up"),
        rule(
            f"shed_load_{metric}",
            metric,
            target,
            f"100% of {metric}",
            for_s=120.0,
            action="shed_load",
        ),
        rule(
            "rollback_goodput_baseline",
            "goodput_vs_baseline",
            1.0,
            "100% of baseline",
            op="<",
            **rollback,
        ),
        rule(
            "rollback_ttft_p99_baseline",
            "ttft.p99_vs_baseline",
            SEED_BASELINE_RATIO,
            "1.2x baseline",
            **rollback,
        ),
        _error_rule(err, rollback_for_s),
    ]
    return rules, f"default (LLM), scaled to {metric} = {target:g} ms"


def _rule(raw: Any, i: int, targets: Targets, rollback_for_s: float) -> Rule:
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
    threshold, expr = resolve_threshold(raw["threshold"], metric, targets, f"{path}.threshold")
    default_for = rollback_for_s if action == "rollback" else 0.0
    for_s = _duration(raw.get("for", default_for), f"{path}.for")
    cooldown_s = _duration(raw.get("cooldown", 60.0), f"{path}.cooldown")
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
    slo: SLO | None, targets: Targets, rollback_for_s: float = 120.0
) -> tuple[list[Rule], str]:
    if _ttft_objective(targets) is not None:
        return llm_default_rules(targets, rollback_for_s)
    return default_rules(slo, rollback_for_s)


def _baselines(raw: Any) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise PolicyError(
            f"policy.baselines: must be a mapping of metric to value, e.g. "
            f"{{ttft.p99: 400, goodput: 0.97}}, got {raw!r}"
        )
    out: dict[str, float] = {}
    for key, value in raw.items():
        try:
            ref = parse_metric(str(key))
        except PolicyError as exc:
            raise PolicyError(f"policy.baselines.{key}: {exc}") from None
        if ref.kind not in ("quantile", "goodput"):
            raise PolicyError(
                f"policy.baselines.{key}: a baseline is a percentile (ms) or goodput (a share)"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise PolicyError(f"policy.baselines.{key}: must be a positive number, got {value!r}")
        if ref.kind == "goodput" and value > 1:
            raise PolicyError(
                f"policy.baselines.{key}: a goodput share is in (0, 1], got {value!r}"
            )
        out[ref.name] = float(value)
    return out


def parse_policy(
    spec: str | dict[str, Any] | None,
    slo: SLO | None = None,
    *,
    targets: Targets | None = None,
    goodput: Mapping[str, float] | None = None,
) -> Policy:
    """Resolve a `policy:` value ('default' or a block) against the budget's objectives.

    `targets` adds objective targets by metric name (`ttft.p95: 1200`) to the flat
    SLO's; a ttft objective makes the default the LLM default. `goodput` holds the
    per-request thresholds (ms by series) a good request meets.
    """
    table = {**slo_targets(slo), **dict(targets or {})}
    good = {k: float(v) for k, v in (goodput or {}).items()}
    if spec is None or spec == "default":
        rules, source = _defaults(slo, table)
        return Policy(rules=rules, source=source, goodput=good)
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
        rules = [_rule(r, i, table, rollback_for) for i, r in enumerate(raw_rules)]
        source = "budget file rules"
    else:
        rules, source = _defaults(slo, table, rollback_for)
    baselines = _baselines(spec.get("baselines", {}))
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
    targets, goodput = objective_targets(budget.objectives)
    return parse_policy(budget.policy, budget.slo, targets=targets, goodput=goodput)


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
    "parse_policy",
    "resolve_policy",
    "resolve_threshold",
    "slo_targets",
]
