"""Scaling policies a simulation compares: the budget's (the live Controller), fixed, HPA.

- `budget`: `control.engine.Controller` on the budget's policy, fed every
  completed request (its end-to-end time; for an LLM service judged on TTFT
  only, its TTFT under the LLM default policy) and evaluated on its own grid,
  exactly as `serve` runs it;
  scale_up/scale_down set the replicas wanted, shed_load and trim_logging
  switch shedding and logging; rollback is journaled only (the simulation has
  no previous version to return to). With classes, each class's shed_load rules run on
  its own requests and shedding goes class by class (sim/class_rules.py).
- `fixed` / `fixed:N`: N replicas throughout (N = the starting count).
- `hpa:concurrency=X` / `hpa:utilization=U`: Kubernetes HPA target tracking:
  every 15 s desired = ceil(ready x metric / target), skipped within a 10%
  tolerance, scale-up at most doubling (or +4) per step, scale-down
  stabilised over 5 minutes (the highest recommendation of that span).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailbudget.budget.default_policy import default_clear
from tailbudget.budget.objectives import Objectives
from tailbudget.budget.policy import Policy, Replicas, Rule, policy_for
from tailbudget.control.class_shedding import ClassPolicy
from tailbudget.control.columns import StageColumn
from tailbudget.control.decision import Decision
from tailbudget.control.engine import Controller
from tailbudget.errors import PolicyError
from tailbudget.sim.class_rules import ClassRules
from tailbudget.sim.fleet import Knobs, TickView

__all__ = [
    "BudgetPolicy",
    "FixedPolicy",
    "HpaPolicy",
    "PolicySpec",
    "llm_default_policy",
    "make_policy",
    "parse_policy_spec",
]

_HPA_SYNC_S = 15.0
_HPA_TOLERANCE = 0.1
_HPA_DOWN_STABILIZATION_S = 300.0


@dataclass(frozen=True)
class PolicySpec:
    """A parsed policy value (budget, fixed:N, hpa:...)."""

    kind: str
    """budget | model | fixed | hpa"""
    replicas: int | None = None
    metric: str | None = None
    """hpa: concurrency | utilization"""
    target: float | None = None

    @property
    def label(self) -> str:
        """How reports name it."""
        if self.kind == "fixed":
            return f"fixed:{self.replicas}" if self.replicas is not None else "fixed"
        if self.kind == "hpa":
            return f"hpa:{self.metric}={self.target:g}"
        return self.kind


def parse_policy_spec(text: str) -> PolicySpec:
    """'budget', 'model', 'fixed', 'fixed:4', 'hpa:concurrency=8', 'hpa:utilization=0.6'."""
    raw = text.strip()
    kind, _, arg = raw.partition(":")
    if kind in ("budget", "model") and not arg:
        return PolicySpec(kind)
    if kind == "fixed":
        if not arg:
            return PolicySpec("fixed")
        if not arg.isdigit() or int(arg) < 1:
            raise PolicyError(
                f"policy fixed:N needs a whole number N >= 1, got {raw!r}", param="policy"
            )
        return PolicySpec("fixed", replicas=int(arg))
    if kind == "hpa":
        metric, sep, value = arg.partition("=")
        if not sep or metric not in ("concurrency", "utilization"):
            raise PolicyError(
                f"policy hpa takes hpa:concurrency=X or hpa:utilization=U, got {raw!r}",
                param="policy",
            )
        try:
            target = float(value)
        except ValueError:
            raise PolicyError(
                f"policy {raw!r}: the target must be a number", param="policy"
            ) from None
        if not target > 0 or not math.isfinite(target) or (metric == "utilization" and target > 1):
            bound = "in (0, 1]" if metric == "utilization" else "a positive number"
            raise PolicyError(
                f"policy {raw!r}: the {metric} target must be {bound}", param="policy"
            )
        return PolicySpec("hpa", metric=metric, target=target)
    raise PolicyError(
        f"policy must be budget, model, fixed, fixed:N, hpa:concurrency=X or "
        f"hpa:utilization=U, got {raw!r}",
        param="policy",
    )


class FixedPolicy:
    """N replicas, nothing else."""

    def __init__(self, replicas: int) -> None:
        self.name = f"fixed:{replicas}"
        self.every_s = 10.0
        self.replicas = replicas

    def tick(self, view: TickView, knobs: Knobs) -> list[Decision]:
        """Keep the count."""
        knobs.desired = self.replicas
        return []


def llm_default_policy(ttft_target_ms: float | Objectives) -> Policy:
    """The LLM default. Given objectives: the rules replay and serve resolve for them
    (`policy_for`), scale_up on every gated e2e, ttft, tpot and itl objective. Given a
    ttft.p95 target alone: scale_up above 90% of it, shed_load above it for 2 minutes."""
    if isinstance(ttft_target_ms, Objectives):
        return policy_for("default", ttft_target_ms)

    def rule(name: str, t: float, expr: str, for_s: float, action: str) -> Rule:
        return Rule.model_validate(
            {"name": name, "metric": "p95", "threshold": t, "for_s": for_s, "action": action,
             "cooldown_s": 60.0, "clear_threshold": default_clear("p95", t),
             "clear_for_s": 120.0, "expr": expr}
        )  # fmt: skip

    rules = [
        rule("scale_up_ttft_p95", 0.9 * ttft_target_ms, "90% of ttft.p95", 0.0, "scale_up"),
        rule("shed_load_ttft_p95", ttft_target_ms, "100% of ttft.p95", 120.0, "shed_load"),
    ]
    return Policy(
        rules=rules, sizing="breach", source=f"LLM default on ttft.p95 = {ttft_target_ms:g} ms"
    )


class BudgetPolicy:
    """The live Controller in the loop, watching end-to-end times or (LLM) TTFT; with
    classes, each class's shed_load rules on its own requests too (`ClassRules`)."""

    def __init__(
        self, policy: Policy, signal: str = "e2e", classes: Sequence[ClassPolicy] = ()
    ) -> None:
        self.name = "budget"
        self.controller = Controller(policy)
        self.every_s = policy.evaluate_every_s
        self.signal = signal
        self.classes = ClassRules(classes) if classes else None

    def tick(self, view: TickView, knobs: Knobs) -> list[Decision]:
        """Feed the completions, evaluate, apply what is active."""
        c = self.controller
        _feed(c, view, self.signal, None)
        decisions = c.evaluate(view.now_s)
        knobs.desired = c.desired_replicas
        knobs.trim = "trim_logging" in c.active
        rules = self.classes
        if rules is None:
            knobs.shed = "shed_load" in c.active
            return decisions
        for name, cc in rules.controllers.items():
            _feed(cc, view, self.signal, rules.rows(name, view.done_class))
        decisions = rules.decide(view.now_s, decisions)
        rules.apply(knobs)
        return decisions


def _feed(c: Controller, view: TickView, signal: str, rows: npt.NDArray[np.bool_] | None) -> None:
    """The view's completions (those of `rows` when given: one class's) into `c`."""
    values = view.done_ttft_ms if signal == "ttft" else view.done_ms
    if not view.done_ts.size or values is None or (rows is not None and not rows.any()):
        return
    pick = slice(None) if rows is None else rows
    # Each request's TTFT also feeds the ttft series, as replay and serve feed it:
    # the LLM default's rules read ttft.p95 there, beside the end-to-end window.
    # TPOT feeds the tpot series likewise: the LLM default scales up on a gated tpot
    # objective too (fewer sequences per replica shorten each decode step).
    given = {"ttft": view.done_ttft_ms, "tpot": view.done_tpot_ms}
    series = {
        k: _known(np.asarray(v, dtype=float)[pick]) for k, v in given.items() if v is not None
    }
    c.observe_columns(
        np.asarray(view.done_ts, dtype=float)[pick],
        np.asarray(values, dtype=float)[pick],
        np.asarray(view.done_err, dtype=bool)[pick],
        series=series,
    )


def _known(ms: npt.NDArray[np.float64]) -> StageColumn:
    rows = np.flatnonzero(np.isfinite(ms))
    return StageColumn(rows.astype(np.int64), ms[rows], dense=rows.size == ms.size)


class HpaPolicy:
    """Kubernetes HPA-style target tracking on concurrency or utilization."""

    def __init__(self, spec: PolicySpec, bounds: Replicas) -> None:
        assert spec.metric is not None and spec.target is not None
        self.name = spec.label
        self.every_s = _HPA_SYNC_S
        self.metric, self.target = spec.metric, spec.target
        self.bounds = bounds
        self.history: deque[tuple[float, int]] = deque()

    def tick(self, view: TickView, knobs: Knobs) -> list[Decision]:
        """One HPA sync: recommend, stabilise, bound."""
        ready = max(1, view.ready)
        value = view.mean_in_system / ready if self.metric == "concurrency" else view.mean_busy
        ratio = value / self.target
        current = knobs.desired
        rec = current if abs(ratio - 1.0) <= _HPA_TOLERANCE else math.ceil(ready * ratio)
        rec = min(rec, max(2 * current, current + 4))
        self.history.append((view.now_s, rec))
        while self.history and self.history[0][0] < view.now_s - _HPA_DOWN_STABILIZATION_S:
            self.history.popleft()
        if rec < current:
            rec = min(current, max(r for _, r in self.history))
        rec = max(self.bounds.min, min(self.bounds.max, rec))
        if rec == current:
            return []
        action = "scale_up" if rec > current else "scale_down"
        knobs.desired = rec
        return [
            Decision(
                t_s=view.now_s,
                action=action,
                metric=self.metric,
                value=value,
                threshold=self.target,
                rule="hpa",
                reason=f"{self.metric} {value:.3g} vs target {self.target:g}; "
                f"desired replicas {current} -> {rec}",
                count=int(view.done_ts.size),
                replicas=rec,
            )
        ]


def make_policy(
    spec: PolicySpec,
    budget_policy: Policy,
    start: int,
    signal: str = "e2e",
    classes: Sequence[ClassPolicy] = (),
) -> tuple[FixedPolicy | BudgetPolicy | HpaPolicy, int]:
    """The runnable policy and the replicas it starts with (`classes`: the budget policy
    runs each class's shed_load rules too)."""
    if spec.kind == "fixed":
        n = spec.replicas or start
        return FixedPolicy(n), n
    bounds = Replicas(
        min=start, max=max(budget_policy.replicas.max, start), step=budget_policy.replicas.step
    )
    if spec.kind == "hpa":
        return HpaPolicy(spec, bounds), start
    policy = budget_policy.model_copy(update={"replicas": bounds})
    return BudgetPolicy(policy, signal, classes), start
