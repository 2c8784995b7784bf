"""Plan checks: do the slices fit the SLO with headroom, per gated percentile?

The additive sum gates (it is what each stage team signs up to); the
Monte Carlo composition is shown beside it as the end-to-end figure to
expect, and raises a warning when it alone crosses the SLO (parallel
fan-out makes the composed tail worse than the max of the slices).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from tailbudget._report_base import ReportBase, rendered
from tailbudget._units import PERCENTILES, min_rows
from tailbudget._verdict import Verdict
from tailbudget.budget import model as m
from tailbudget.budget.compose import (
    MEASURED_METHOD,
    Composed,
    additive,
    budget_tree,
    compose,
    stage_points,
)
from tailbudget.budget.distributions import Lognormal, SplicedLognormal
from tailbudget.budget.plan_classes import ClassPlan, class_budget
from tailbudget.budget.plan_goodput import GoodputPlan, plan_goodput
from tailbudget.budget.plan_llm import ttft_holder
from tailbudget.budget.plan_objectives import (
    ObjectiveCheck,
    PlanVerdict,
    Problem,
    check_objectives,
    counted,
    e2e_figures,
    fmt_ms,
    thin_note,
    thin_problem,
)

__all__ = [
    "Composition",
    "GateCheck",
    "Gates",
    "LlmSlice",
    "ObjectiveCheck",
    "Plan",
    "Problem",
    "StageSlice",
    "make_plan",
]


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class LognormalFit(_Row):
    """A lognormal through the stage's slices (or one slice and the default spread)."""

    distribution: Literal["lognormal"] = "lognormal"
    mu: float
    sigma: float
    points: int
    default_spread: bool


class SplicedFit(_Row):
    """A lognormal spliced between each pair of the stage's slices."""

    distribution: Literal["spliced_lognormal"] = "spliced_lognormal"
    points: int
    sigmas: list[float]
    default_spread: bool = False


class OtherFit(_Row):
    """A distribution the plan names without parameters."""

    distribution: str


class StageSlice(_Row):
    """One stage's slices, its share of each SLO percentile and the fit behind it."""

    name: str
    path: str
    in_parallel: bool
    source: str
    """`budget` (slices given) or `llm` (slices from the LLM block)."""
    budget: dict[str, float | None]
    share_of_slo: dict[str, float]
    fit: LognormalFit | SplicedFit | OtherFit
    inside: str | None = None
    """The stage this one runs inside (the budget's `calls:`): its caller's slice is the
    caller's own time, this stage's time is not in it."""

    @property
    def default_spread(self) -> bool:
        """The stage states one percentile: its spread is the composition's default."""
        return not isinstance(self.fit, OtherFit) and self.fit.default_spread


class LlmSlice(_Row):
    """An LLM stage's time: TTFT + decode + tail, and which part dominates."""

    stage: str
    ttft_ms: float
    decode_ms: float
    tail_ms: float
    total_ms: float
    output_tokens: int
    tokens_per_s: float
    dominant: str
    decode_share: float
    ttft_stage: str | None = None
    """The stage that holds this call's TTFT (then `total_ms` is decode + tail only)."""


class GateCheck(_Row):
    """One gated percentile: the additive sum against the SLO less headroom."""

    percentile: str
    slo_ms: float
    limit_ms: float
    additive_ms: float
    composed_ms: float
    free_share: float
    headroom_required: float
    fits: bool | None
    """None: the gating figure is inconclusive (`verdict`), so it does not gate."""
    verdict: PlanVerdict = "fits"
    """fits | does_not_fit | inconclusive: the log's requests (composition.measured) are
    too few for a verdict at this percentile, by the audit's rule."""


class Gates(_Row):
    """Which percentiles gate, by environment, and each gated percentile's check."""

    environment: str | None
    gated: list[str]
    by_environment: dict[str, list[str]]
    checks: list[GateCheck]


class Composition(_Row):
    """The Monte Carlo end-to-end percentiles and how they were drawn."""

    p50: float
    p95: float
    p99: float
    method: str
    samples: int
    correlation: float
    default_sigma: float
    default_spread_stages: list[str]

    def at(self, percentile: str) -> float:
        """The composed figure at p50, p95 or p99."""
        return float(getattr(self, percentile))


class Plan(BaseModel, ReportBase):
    """The result of `tailbudget plan`, serialised as the JSON contract."""

    model_config = ConfigDict(frozen=True)

    service: str
    environment: str | None
    """None: no environment given, every stated objective gates."""
    fits: bool | None
    """None: nothing gated fails, but a gated figure measured on a log is inconclusive
    (the one verdict rule): never true then."""
    slo: dict[str, float | None]
    headroom: float
    overhead_ms: float
    gating: str
    stages: list[StageSlice]
    additive: dict[str, float]
    composed: Composition
    llm: list[LlmSlice]
    gates: Gates
    objectives: list[ObjectiveCheck]
    """Every objective (e2e, ttft, tpot, itl, stages) with its additive and composed figure."""
    goodput: GoodputPlan | None = None
    """The share of requests the distributions expect to meet every per-request threshold."""
    problems: list[Problem]
    classes: list[ClassPlan] | None = None
    """Each class of the budget's `classes:` planned on the stages it goes through."""

    @model_serializer(mode="wrap")
    def _without_classes(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The class keys appear only when classes were asked for: every other document
        # stays as it was.
        data = handler(self)
        if self.classes is None and isinstance(data, dict):
            for key in ("classes",):
                data.pop(key, None)
        return data

    @property
    def not_checked(self) -> bool:
        """True when no gated objective could be estimated: no verdict, not a fit."""
        gated = [o for o in self.objectives if o.gated]
        return (
            not self.gates.checks and bool(gated) and all(o.verdict == "not_checked" for o in gated)
        )

    def verdict_words(self) -> str:
        """`fits`, `does not fit`, `inconclusive` (a gated figure measured on a log the one
        verdict rule does not settle) or `not checked`: the plan's verdict in every format."""
        if self.not_checked:
            return "not checked"
        if self.fits is None:
            return "inconclusive"
        return "fits" if self.fits else "does not fit"

    def to_text(self) -> str:
        """The plan as the terminal shows it, without colour (`--format text`)."""
        return rendered(self, "text")


def _fmt(ms: float) -> str:
    return f"{ms:,.0f} ms"


def _fit(fit: object) -> LognormalFit | SplicedFit | OtherFit:
    if isinstance(fit, SplicedLognormal):
        return SplicedFit(points=len(fit.z), sigmas=[round(x, 6) for x in fit.sigmas])
    if isinstance(fit, Lognormal):
        return LognormalFit(
            mu=round(fit.mu, 6),
            sigma=round(fit.sigma, 6),
            points=fit.points,
            default_spread=fit.default_spread,
        )
    return OtherFit(distribution="lognormal")


def _stage_slice(
    path: str,
    stage: m.Stage,
    fits: Mapping[str, object],
    gated: Sequence[str],
    slo: Mapping[str, float],
) -> StageSlice:
    points = stage_points(stage, gated)
    return StageSlice(
        name=stage.name,
        path=path,
        in_parallel=".parallel[" in path,
        source="budget" if stage.budget is not None else "llm",
        budget={p: points.get(p) for p in PERCENTILES},
        share_of_slo={
            p: round(points[p] / slo[p], 4) for p in PERCENTILES if p in points and p in slo
        },
        fit=_fit(fits[stage.name]),
    )


SKIPPED_SHARE = 0.01
"""A stage whose p50 slice is under this share of its p99 one is skipped by most requests
(init --from writes what a span table measures: 0 where a request does not call it)."""


def _loose_bound(budget: m.Budget, percentile: str, composed_ms: float) -> str:
    """Why the additive gate overstates a budget whose stages most requests skip: the gate
    is the contract, this says how loose it is there."""
    slices = [s.budget.given() for _, s in budget.stages() if s.budget is not None]
    skipped = [
        g for g in slices if "p50" in g and "p99" in g and g["p50"] < SKIPPED_SHARE * g["p99"]
    ]
    if len(slices) < 3 or 3 * len(skipped) < len(slices):
        return ""
    return (
        f"; {len(skipped)} of {len(slices)} stages are 0 at p50 (most requests skip them), "
        f"so the slices' sum is a loose upper bound here: composed, the {percentile} is "
        f"{_fmt(composed_ms)} (the audit measures a log's own end-to-end figure)"
    )


def _over_requests(
    budget: m.Budget, p: str, target: float, limit: float, composed_ms: float, summed: float
) -> Problem:
    got = budget.composition.measured
    assert got is not None
    return Problem(
        severity="error",
        metric="e2e",
        percentile=p,
        message=(
            f"{p}: the log's {got.requests:,} requests measure {_fmt(composed_ms)} end to end "
            f"with these slices, {_fmt(composed_ms - limit)} over the {_fmt(limit)} limit "
            f"(SLO {_fmt(target)} less {budget.headroom:.0%} headroom); the slices add to "
            f"{_fmt(summed)} as if one request were at every stage's {p} at once "
            "(composition.measured); cut the stages the slow requests spend their time in "
            "(`tailbudget rebudget` with the log), or relax the SLO"
        ),
    )


def _thin_requests(budget: m.Budget, p: str, v: Verdict | None) -> str:
    """Why the log's requests do not settle `p` ('' when they do): the verdict rule on
    the log's count over the target, else (not counted) the minimum for a verdict."""
    if v is not None:
        return f"inconclusive: {v.reason}" if v.verdict == "inconclusive" else ""
    got = budget.composition.measured
    if got is None or got.requests >= min_rows(p):
        return ""
    return thin_note(got.requests, p)


def _goodput_short(budget: m.Budget, goodput: GoodputPlan) -> Problem:
    # A budget measured from a log (composition.measured) draws its log's distributions
    # and counts its failed requests: a share wholly under the minimum is the audit's
    # breach, and gates as it does ("does not fit", as init says). A stated budget's
    # distributions are an estimate: a warning.
    measured = budget.composition.measured is not None
    assert goodput.min is not None
    return Problem(
        severity="error" if measured else "warning",
        metric="goodput",
        message=(
            f"goodput: the {'measured ' if measured else ''}distributions expect at most "
            f"{goodput.share_high:.1%} of requests to meet every threshold, under the "
            f"{goodput.min:.1%} minimum ({goodput.method}); `tailbudget audit` measures it "
            "on a log"
        ),
    )


def _llm_slices(budget: m.Budget) -> tuple[list[LlmSlice], list[Problem]]:
    """Each LLM stage's slice from its medians, and the stated slices it does not fit."""
    problems: list[Problem] = []
    llm_rows: list[LlmSlice] = []
    for _, stage in budget.stages():
        if stage.llm is None:
            continue
        spec = stage.llm
        holder = ttft_holder(budget, stage)
        own = spec.total_ms - (spec.ttft_ms if holder else 0.0)
        row = LlmSlice(
            stage=stage.name,
            ttft_ms=spec.ttft_ms,
            decode_ms=round(spec.decode_ms, 3),
            tail_ms=spec.tail_ms,
            total_ms=round(own, 3),
            ttft_stage=holder,
            output_tokens=spec.median_tokens,
            tokens_per_s=spec.tokens_per_s,
            dominant=spec.dominant,
            decode_share=round(spec.decode_ms / spec.total_ms, 4),
        )
        llm_rows.append(row)
        # A measured block (distributions) describes the slice it sits on: medians of
        # tokens and TPOT do not multiply into a median decode time, so it is not checked.
        if stage.budget is None or spec.tpot is not None:
            continue
        # With a `ttft` stage before it, this stage's slice holds decode only.
        own_ms = own
        ttft_part = "" if holder else f"TTFT {spec.ttft_ms:,.0f} ms + "
        for p in budget.gated:
            slice_ms = stage.budget.given().get(p)
            if slice_ms is not None and own_ms > slice_ms:
                fix = (
                    "cap output_tokens or raise tokens/s (decode dominates)"
                    if spec.dominant == "decode"
                    else "cut prompt length or queueing (prefill dominates)"
                )
                problems.append(
                    Problem(
                        severity="error",
                        stage=stage.name,
                        percentile=p,
                        message=(
                            f"{stage.name}: {ttft_part}{spec.median_tokens} "
                            f"tokens at {spec.tokens_per_s:g} tok/s ({spec.decode_ms:,.0f} ms) + "
                            f"tail {spec.tail_ms:,.0f} ms = {_fmt(own_ms)}, over its {p} "
                            f"slice of {_fmt(slice_ms)} by {_fmt(own_ms - slice_ms)}; {fix}"
                        ),
                    )
                )
    return llm_rows, problems


def _gate_checks(
    budget: m.Budget,
    e2e: dict[str, tuple[float, float]],
    stages: list[StageSlice],
    by_requests: bool,
    at_tokens: int | None,
) -> tuple[list[GateCheck], list[Problem]]:
    """One check per gated percentile: the slices' sum (or the log's requests) against the
    SLO less headroom, and what to do where it does not fit."""
    slo = budget.objectives.e2e()
    problems: list[Problem] = []
    checks: list[GateCheck] = []
    for p in budget.gated:
        target = slo[p]
        limit = target * (1.0 - budget.headroom)
        summed, composed_p = e2e[p]
        used = composed_p if by_requests else summed
        ok = used <= limit + 1e-9
        # The one verdict rule on the log's count over the target (while the figure is
        # still the log's): a breach it proves gates however few the requests.
        v = counted(budget, f"e2e.{p}", target, used) if by_requests else None
        ok = ok and (v is None or v.verdict != "breach")
        thin = _thin_requests(budget, p, v) if by_requests else None
        checks.append(
            GateCheck(
                percentile=p,
                slo_ms=target,
                limit_ms=round(limit, 3),
                additive_ms=round(summed, 3),
                composed_ms=round(composed_p, 3),
                free_share=round(1.0 - used / target, 4),
                headroom_required=budget.headroom,
                fits=None if thin else ok,
                verdict="inconclusive" if thin else "fits" if ok else "does_not_fit",
            )
        )
        if thin:
            # The audit's rule: too few of the log's requests beyond p for a verdict.
            if not ok:
                figure = f"the log's requests' {fmt_ms(composed_p)}"
                problems.append(thin_problem(p, figure, limit, thin))
            continue
        if not ok and at_tokens is not None:
            continue  # the objective check names the LLM stage at N tokens
        if not ok and by_requests:
            problems.append(_over_requests(budget, p, target, limit, composed_p, summed))
            continue
        if not ok:
            by_stage = [(s.name, ms) for s in stages if (ms := s.budget[p]) is not None]
            # No slice states p (a p95 objective over p99-only slices): estimated ones.
            name, biggest = max(by_stage, key=lambda kv: kv[1]) if by_stage else (None, None)
            largest = (
                f"largest slice is {name} at {_fmt(biggest)} ({biggest / target:.0%} of the SLO)"
                if name is not None and biggest is not None
                else f"no slice states {p}: the figures are estimated from the slices given"
            )
            problems.append(
                Problem(
                    severity="error",
                    metric="e2e",
                    percentile=p,
                    stage=name,
                    message=(
                        f"{p}: slices add to {_fmt(used)}, {_fmt(used - limit)} over the "
                        f"{_fmt(limit)} limit (SLO {_fmt(target)} less {budget.headroom:.0%} "
                        f"headroom); {largest}{_loose_bound(budget, p, composed_p)}"
                    ),
                )
            )
        elif composed_p > target:
            problems.append(
                Problem(
                    severity="warning",
                    metric="e2e",
                    percentile=p,
                    message=(
                        f"{p}: slices fit, but the composed end-to-end {p} is "
                        f"{_fmt(composed_p)}, over the {_fmt(target)} SLO: parallel "
                        "branches make the tail of their max worse than the max of their tails"
                    ),
                )
            )
    return checks, problems


def _composition(budget: m.Budget, comp: Composed, stages: list[StageSlice]) -> Composition:
    pcts = {p: round(v, 3) for p, v in comp.percentiles.items()}
    composed = Composition(
        p50=pcts["p50"],
        p95=pcts["p95"],
        p99=pcts["p99"],
        method=comp.method,
        samples=comp.samples,
        correlation=comp.correlation,
        default_sigma=budget.composition.default_sigma,
        default_spread_stages=[s.name for s in stages if s.default_spread],
    )
    return composed


def _nothing_checked(rows: list[ObjectiveCheck], checks: list[GateCheck]) -> list[Problem]:
    # A plan that could estimate none of its gated objectives has shown nothing: it must not
    # read FITS beside "not checked" on every row (a chat budget with ttft/tpot objectives
    # and no llm: block did).
    gated = [o for o in rows if o.gated]
    if checks or not gated or any(o.verdict != "not_checked" for o in gated):
        return []
    keys = ", ".join(f"{o.metric}.{o.percentile}" for o in gated)
    return [
        Problem(
            severity="error",
            message=(
                f"no gated objective could be estimated from the slices ({keys}), so the "
                "plan cannot say the budget fits: give the LLM stage an llm: block "
                "(ttft_ms, tokens_per_s), or check a log with `tailbudget audit`"
            ),
        )
    ]


def _fits(
    problems: list[Problem], checks: list[GateCheck], rows: list[ObjectiveCheck]
) -> bool | None:
    """False on any error; None (never true) where a gated figure is inconclusive by the
    one verdict rule; else True."""
    if any(pr.severity == "error" for pr in problems):
        return False
    thin = any(c.verdict == "inconclusive" for c in checks)
    return None if thin or any(o.gated and o.verdict == "inconclusive" for o in rows) else True


def make_plan(budget: m.Budget, *, samples: int | None = None, seed: int | None = None) -> Plan:
    """Check a budget: additive sums, composition, LLM slices, headroom per gated percentile."""
    # Fit the stages once; the additive sum and the Monte Carlo both read the fits.
    tree, fits = budget_tree(budget)
    add = additive(budget, fits=fits)
    comp = compose(budget, samples=samples, seed=seed, tree=tree)
    slo = budget.objectives.e2e()
    # The Monte Carlo's own draws for the other objectives (a budget composed from its log's
    # requests reports their count as the composition's samples).
    draws = samples if samples is not None else budget.composition.samples
    mc = {"samples": draws, "seed": seed if seed is not None else budget.composition.seed}
    e2e = e2e_figures(budget, fits, add, comp.percentiles, **mc)
    at_tokens = budget.objectives.e2e_output_tokens()
    # A budget recording its log's whole requests gates on them: the slices' sum assumes
    # every request runs every stage, which a span table's requests do not.
    by_requests = comp.method == MEASURED_METHOD and at_tokens is None
    problems: list[Problem] = []

    caller_of = {
        s: caller for caller, terms in budget.callers().items() for term in terms for s in term
    }
    stages = [
        _stage_slice(path, stage, fits, budget.gated, slo).model_copy(
            update={"inside": caller_of.get(stage.name)}
        )
        for path, stage in budget.stages()
    ]

    llm_rows, llm_problems = _llm_slices(budget)
    problems += llm_problems

    checks, gate_problems = _gate_checks(budget, e2e, stages, by_requests, at_tokens)
    problems += gate_problems

    objective_rows, more = check_objectives(budget, fits, e2e, by_requests=by_requests, **mc)
    problems += more
    problems += _nothing_checked(objective_rows, checks)
    goodput = plan_goodput(budget, fits, tree, **mc)
    if goodput is not None and goodput.fits is False:
        problems.append(_goodput_short(budget, goodput))
    composed = _composition(budget, comp, stages)
    targets = budget.objectives.e2e()
    plan = Plan(
        service=budget.service,
        environment=budget.environment,
        fits=_fits(problems, checks, objective_rows),
        slo={p: targets.get(p) for p in PERCENTILES}
        | targets
        | {"error_rate": budget.objectives.error_rate},
        headroom=budget.headroom,
        overhead_ms=budget.overhead_ms,
        gating="measured_requests" if by_requests else "additive",
        stages=stages,
        additive={p: round(v, 3) for p, v in add.items()},
        composed=composed,
        llm=llm_rows,
        gates=Gates(
            environment=budget.environment,
            gated=list(budget.gated),
            by_environment={env: list(ps) for env, ps in m.GATES.items()},
            checks=checks,
        ),
        objectives=objective_rows,
        goodput=goodput,
        problems=problems,
    )
    return _with_classes(plan, budget, samples=samples, seed=seed)


def _with_classes(plan: Plan, budget: m.Budget, **mc: Any) -> Plan:
    """The plan with each class planned on the stages it goes through; the whole plan
    fits only when every class fits too."""
    if budget.classes is None:
        return plan
    rows: list[ClassPlan] = []
    for name, spec in budget.classes.specs().items():
        sub = class_budget(budget, name)
        got = make_plan(sub, **mc)
        rows.append(
            ClassPlan(
                name=name,
                priority=spec.priority,
                skip=list(spec.skip),
                stages=[s.name for _, s in sub.stages()],
                fits=got.fits,
                objectives=got.objectives,
                composed={p: got.composed.at(p) for p in PERCENTILES},
                problems=[p.message for p in got.problems if p.severity == "error"],
            )
        )
    fits = plan.fits and all(r.fits for r in rows)
    # Each class's error is one of the plan's problems, named by its class, so every
    # format and the gate's message say which class does not fit.
    said = [
        Problem(severity="error", message=f"class {r.name}: {text}")
        for r in rows
        for text in r.problems
    ]
    return plan.model_copy(
        update={"classes": rows, "fits": fits, "problems": [*plan.problems, *said]}
    )
