"""Step 8a: the fix catalog, one candidate fix per hypothesis kind, with default engineering
hours, risk and reversibility. A budget file's `fixes:` block overrides any of them by fix
name, e.g. `fixes: {prewarm_replicas: {hours: 2, risk: low}}`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from tailbudget.errors import BudgetError

Risk = Literal["low", "medium", "high"]


@dataclass(frozen=True)
class Fix:
    """A candidate fix for one kind of tail cause."""

    name: str
    kind: str
    hours: float
    risk: Risk
    reversible: bool
    counterfactual: str
    """How the log is rewritten to estimate the fix's effect."""


CATALOG: dict[str, Fix] = {
    f.kind: f
    for f in (
        Fix(
            "cap_input_size",
            "input_shape",
            8,
            "low",
            True,
            "covariate capped at its p95, the stage lowered along the fitted slope",
        ),
        Fix(
            "limit_fanout",
            "fanout",
            16,
            "medium",
            True,
            "fan-out capped at its median, the stage lowered along the fitted slope",
        ),
        Fix(
            "prewarm_replicas",
            "cold_start",
            6,
            "low",
            True,
            "requests in cold windows served at the warm level (scaled by warm/cold mean)",
        ),
        Fix(
            "add_capacity",
            "contention",
            2,
            "low",
            True,
            "the stage's load-driven excess above the median minute removed",
        ),
        Fix(
            "hedge_requests",
            "external_dependency",
            12,
            "medium",
            True,
            "a hedged second call at the stage's p95: the stage capped at p95 + p50",
        ),
        Fix(
            "warm_cache",
            "cache_miss",
            10,
            "low",
            True,
            "every miss served at the hit level (an upper bound)",
        ),
        Fix(
            "instrument_missing_hop",
            "missing_slice",
            4,
            "low",
            True,
            "the unattributed time of slow requests at its fast-group level",
        ),
        Fix(
            "bound_queue_and_prompt",
            "llm_prefill",
            8,
            "medium",
            True,
            "time to first token of slow requests at its fast-group level",
        ),
        Fix(
            "speed_up_decode",
            "llm_decode",
            24,
            "high",
            False,
            "decode time of slow requests at its fast-group level",
        ),
    )
}

_RISKS = ("low", "medium", "high")


def catalog(overrides: dict[str, dict[str, Any]]) -> dict[str, Fix]:
    """The catalog by hypothesis kind, with a budget file's overrides applied."""
    by_name = {f.name: f for f in CATALOG.values()}
    out = dict(CATALOG)
    for name, values in overrides.items():
        if name not in by_name:
            raise BudgetError(
                f"fixes.{name}: unknown fix; known fixes are {', '.join(sorted(by_name))}"
            )
        fix = by_name[name]
        changes: dict[str, Any] = {}
        for key, value in values.items():
            if key == "hours":
                if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                    raise BudgetError(
                        f"fixes.{name}.hours must be a positive number, got {value!r}"
                    )
                changes["hours"] = float(value)
            elif key == "risk":
                if value not in _RISKS:
                    raise BudgetError(
                        f"fixes.{name}.risk must be low, medium or high, got {value!r}"
                    )
                changes["risk"] = value
            elif key == "reversible":
                if not isinstance(value, bool):
                    raise BudgetError(
                        f"fixes.{name}.reversible must be true or false, got {value!r}"
                    )
                changes["reversible"] = value
            else:
                raise BudgetError(f"fixes.{name}: unknown key {key!r}; use hours, risk, reversible")
        out[fix.kind] = replace(fix, **changes)
    return out
