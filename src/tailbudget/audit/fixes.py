"""Step 8a: the fix catalog: candidate fixes with default engineering hours, risk and
reversibility, one per hypothesis kind except input_shape, which has two: `cap_input_size`,
and `cap_output_tokens` when the covariate is an output length (`covariates.py` decides).
A budget file's `fixes:` block overrides any of them by fix name, e.g.
`fixes: {prewarm_replicas: {hours: 2, risk: low}}`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from tailbudget import _fmt as fmt
from tailbudget.audit.covariates import is_output_length
from tailbudget.audit.report import AuditReport
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
    action: str = ""
    """What to do, for the recommendation; may use {covariate} and {cap} (the hypothesis's
    covariate and cap figure), so it is only set on fixes whose hypothesis has both."""


CATALOG: dict[str, Fix] = {
    f.name: f
    for f in (
        Fix(
            "cap_input_size",
            "input_shape",
            8,
            "low",
            True,
            "covariate capped at its p95, the stage lowered along the fitted slope",
            "cap {covariate} at about {cap:,.4g}, its p95",
        ),
        # Capping generation is a request parameter (max_tokens) set at the gateway or in the
        # client, not new truncation or chunking code as for inputs: 4 h to set it and check
        # a sample of the answers it would cut. Medium risk: the longest ~5% of answers stop
        # mid-way, which users see (a prompt asking for brevity softens it). Reversible: one
        # configuration value.
        Fix(
            "cap_output_tokens",
            "input_shape",
            4,
            "medium",
            True,
            "output length capped at its p95 (max_tokens), the stage lowered along the fitted "
            "slope",
            "cap generation length: set max_tokens to about {cap:,.0f}, the p95 of {covariate}",
        ),
        Fix(
            "limit_fanout",
            "fanout",
            16,
            "medium",
            True,
            "fan-out capped at its median, the stage lowered along the fitted slope",
            "cap {covariate} at about {cap:,.4g}, its median",
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
        # Fixes of breached LLM objectives (TTFT, TPOT): their counterfactuals rewrite the
        # objective's metric per request (audit/llm_causes.py), then e2e and goodput with it.
        Fix(
            "add_llm_replicas",
            "llm_queueing",
            2,
            "low",
            True,
            "each request's TTFT capped at what the low-load reference predicts for its "
            "prompt length (fit plus two residual standard deviations): the queue wait removed",
            "add model replicas (or scale on TTFT) until requests stop waiting for a slot",
        ),
        Fix(
            "cap_prompt_tokens",
            "llm_prefill",
            6,
            "medium",
            True,
            "prompts capped at their p95 length, TTFT lowered along its fitted slope on "
            "input tokens",
            "cap prompt length (retrieved context, history) at about {cap:,.0f} tokens",
        ),
        Fix(
            "limit_decode_batch",
            "llm_decode_contention",
            3,
            "medium",
            True,
            "each request's TPOT capped at what the low-load reference predicts (fit plus two "
            "residual standard deviations): fewer concurrent decoders (max_num_seqs) or more "
            "replicas; with fewer sequences per replica and no new replica, TTFT queueing grows",
            "lower max_num_seqs per replica, or add replicas, so fewer requests decode at once",
        ),
        # Changes a re-budget proposes (`tailbudget rebudget`); no audit hypothesis has their
        # kinds, so they never rank as a hypothesis's fix. A smaller or quantized model takes
        # an evaluation of answer quality on top of the swap: a week, medium risk.
        Fix(
            "speed_up_stage",
            "stage_speed",
            16,
            "medium",
            True,
            "the stage scaled down until its gated percentile meets its proposed slice (a "
            "target for profiling and optimizing it, not a measured change)",
        ),
        Fix(
            "smaller_model",
            "model_size",
            40,
            "medium",
            True,
            "the stage at 0.6x its time (a smaller or quantized model; measure the candidate)",
        ),
        Fix(
            "degrade_stage",
            "degrade",
            6,
            "medium",
            True,
            "the stage cut off at its p90 with a fallback (an optional step skipped when slow)",
        ),
        Fix(
            "parallelize_stages",
            "structure",
            16,
            "medium",
            True,
            "two independent sequential stages run at once: their per-request max, not their sum",
        ),
    )
}

_RISKS: tuple[Risk, ...] = ("low", "medium", "high")


def fix_name(kind: str, covariate: str | None = None) -> str | None:
    """The catalog name of the fix for a hypothesis of `kind` fitted on `covariate`."""
    if kind == "input_shape" and covariate is not None and is_output_length(covariate):
        return "cap_output_tokens"
    return next((f.name for f in CATALOG.values() if f.kind == kind), None)


def fix_for(cat: dict[str, Fix], kind: str, covariate: str | None = None) -> Fix | None:
    """The fix in `cat` (as `catalog` returns it) for a hypothesis."""
    name = fix_name(kind, covariate)
    return cat.get(name) if name is not None else None


def action(fix: Fix, covariate: str | None, figures: dict[str, float]) -> str:
    """The fix's action in words with the hypothesis's figures, or "" without them."""
    if not fix.action or covariate is None or "cap" not in figures:
        return ""
    return fix.action.format(covariate=covariate, cap=figures["cap"])


def catalog(overrides: Mapping[str, Mapping[str, object]]) -> dict[str, Fix]:
    """The catalog by fix name, with a budget file's overrides applied."""
    out = dict(CATALOG)
    for name, values in overrides.items():
        if name not in CATALOG:
            raise BudgetError(
                f"fixes.{name}: unknown fix; known fixes are {', '.join(sorted(CATALOG))}"
            )
        fix = CATALOG[name]
        for key, value in values.items():
            if key == "hours":
                if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                    raise BudgetError(
                        f"fixes.{name}.hours must be a positive number, got {value!r}"
                    )
                fix = replace(fix, hours=float(value))
            elif key == "risk":
                risk = next((r for r in _RISKS if r == value), None)
                if risk is None:
                    raise BudgetError(
                        f"fixes.{name}.risk must be low, medium or high, got {value!r}"
                    )
                fix = replace(fix, risk=risk)
            elif key == "reversible":
                if not isinstance(value, bool):
                    raise BudgetError(
                        f"fixes.{name}.reversible must be true or false, got {value!r}"
                    )
                fix = replace(fix, reversible=value)
            else:
                raise BudgetError(f"fixes.{name}: unknown key {key!r}; use hours, risk, reversible")
        out[name] = fix
    return out


def with_replicas(
    report: AuditReport, replicas: int, basis: str, *, meets: bool = True, rest: str = ""
) -> AuditReport:
    """The report with `add_capacity` carrying how many replicas a simulation needs.

    `meets` False: no count met every objective; `replicas` wins 90% of what unlimited
    replicas would, and `rest` says what remains (e.g. 'e2e.p99 1,739 ms vs 1,500').
    """
    ranking = [
        r.model_copy(update={"replicas": replicas}) if r.fix == "add_capacity" else r
        for r in report.ranking
    ]
    rec = report.recommendation
    if rec.choice == "add_capacity":
        if meets:
            extra = f" Simulated at this log's load: {fmt.counted(replicas, 'replica')} ({basis})."
        else:
            extra = (
                f" Simulated at this log's load, {fmt.counted(replicas, 'replica')} "
                f"{'wins' if replicas == 1 else 'win'} 90% of what capacity "
                f"can ({basis}); what remains even with unlimited replicas ({rest}) is not "
                "capacity."
            )
        rec = rec.model_copy(update={"text": rec.text + extra})
    return report.model_copy(update={"ranking": ranking, "recommendation": rec})
