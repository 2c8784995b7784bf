"""Plan checks per objective: e2e (at the budget's answer length or at N tokens), TTFT,
TPOT, ITL and stage objectives, each with its additive and composed figure.

TTFT is what the client waits for before the first token: the per-request overhead,
every top-level step before the streamed LLM stage, and that stage's `ttft_ms`.
TPOT is the LLM block's steady decode rate, 1000 / tokens_per_s ms per token, at
every percentile (a plan has no spread of decode speed to compose). An e2e
objective with `output_tokens: N` holds for an N-token answer: the LLM stage takes
ttft + (N - 1) x tpot + tail there.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tailbudget import _fmt as fmt
from tailbudget._units import min_rows, quantile_of
from tailbudget._verdict import Verdict, judge
from tailbudget.budget import model as m
from tailbudget.budget.compose import Node, monte_carlo, stage_points
from tailbudget.budget.distributions import Constant, Distribution, fit_stage
from tailbudget.budget.llm_spec import FLOOR_MS
from tailbudget.budget.objectives import Objective
from tailbudget.budget.plan_llm import before, streamed, ttft_holder

Severity = Literal["error", "warning"]
PlanVerdict = Literal["fits", "does_not_fit", "inconclusive", "not_checked"]


class Problem(BaseModel):
    """Something a person should change, with the figures that show it."""

    model_config = ConfigDict(frozen=True)

    severity: Severity
    message: str
    percentile: str | None = None
    stage: str | None = None
    metric: str | None = None
    """The objective's metric (e2e, ttft, tpot, itl or a stage) when one is broken."""


class ObjectiveCheck(BaseModel):
    """One objective against the plan: the additive and composed figures and the verdict."""

    model_config = ConfigDict(frozen=True)

    metric: str
    percentile: str
    target_ms: float
    limit_ms: float
    """Target less the headroom: what the slices must stay under."""
    additive_ms: float | None
    composed_ms: float | None
    fits: bool | None
    """None: the plan cannot check this objective, or its figure is inconclusive (`note`)."""
    gated: bool
    stage: str | None = None
    """The slice that decides the figure (the LLM stage for ttft/tpot)."""
    output_tokens: int | None = None
    note: str = ""
    verdict: PlanVerdict = "not_checked"
    """fits | does_not_fit | inconclusive (a figure measured on fewer values than the
    audit needs for a verdict at its percentile: the audit's rule, and it does not gate) |
    not_checked."""
    n: int | None = None
    """How many values a measured figure comes from (None: a stated figure)."""
    over: int | None = None
    """How many of them were over the target (composition.measured.counted; None: not
    counted, a stated figure or one edited since)."""
    confidence: float | None = None
    """The verdict rule's confidence in the side the log leans to (with `over`)."""


def counted(budget: m.Budget, key: str, target_ms: float, figure: float | None) -> Verdict | None:
    """The one verdict rule on the log a measured budget records (its count over the
    target), while the objective's target and plan figure are still the log's; None
    otherwise (a stated budget, a changed target, an edited slice)."""
    got = budget.composition.measured
    c = got.counted.get(key) if got is not None else None
    if c is None or figure is None or abs(c.target - target_ms) > 1e-9 * max(1.0, target_ms):
        return None
    if abs(figure - c.measured) > 2e-3 * c.measured:  # the file rounds at 4-7 digits
        return None
    _, _, percentile = key.rpartition(".")
    return judge(percentile, target_ms, c.measured, c.n, c.over)


def thin_note(n: int, percentile: str, what: str = "requests") -> str:
    """Why a measured figure is inconclusive, in the words `init --from` uses."""
    return f"inconclusive: {n:,} {what}, {min_rows(percentile):,} needed for {percentile}"


def thin_problem(key: str, figure: str, limit_ms: float, said: str) -> Problem:
    """A measured figure over its limit on too few values: a warning, never a gate."""
    metric, _, percentile = key.rpartition(".")
    return Problem(
        severity="warning",
        metric=metric or "e2e",
        percentile=percentile,
        message=(
            f"{key}: {figure} is over the {fmt_ms(limit_ms)} limit, but {said} (the audit's "
            "rule, the audit's verdict too): it does not gate; a longer log decides it"
        ),
    )


def fmt_ms(ms: float) -> str:
    """'45.5 ms', '60 ms' below 100 ms, '1,250 ms' above: the one formatter's way with a
    target or a measured figure (it read '60.0 ms' here and '60 ms' everywhere else)."""
    return fmt.threshold("ms", ms)


class _Checker:
    """Holds the fitted stages and the Monte Carlo settings for the composed figures."""

    def __init__(
        self,
        budget: m.Budget,
        fits: dict[str, Distribution],
        *,
        samples: int,
        seed: int,
        by_requests: bool = False,
    ) -> None:
        self.b = budget
        self.by_requests = by_requests
        self.fits = fits
        self.samples = samples
        self.seed = seed
        self.llm = streamed(budget)
        self.limit = 1.0 - budget.headroom
        self.problems: list[Problem] = []

    def check(self, obj: Objective, e2e: dict[str, tuple[float, float]]) -> ObjectiveCheck:
        if obj.metric == "e2e":
            return self._e2e(obj, e2e)
        if obj.metric == "ttft":
            return self._ttft(obj)
        if obj.metric in ("tpot", "itl"):
            return self._decode(obj)
        return self._stage(obj)

    def _row(
        self,
        obj: Objective,
        add: float | None,
        comp: float | None,
        *,
        gate: float | None = None,
        **kw: Any,
    ) -> ObjectiveCheck:
        limit = obj.target_ms * self.limit
        gate = add if gate is None else gate
        fits = None if gate is None else gate <= limit + 1e-9
        n = self._count(obj)
        verdict: PlanVerdict = "not_checked" if fits is None else "fits" if fits else "does_not_fit"
        v = counted(self.b, obj.key, obj.target_ms, gate)
        if v is not None:
            kw |= {"over": v.over, "confidence": v.confidence}
        if v is not None and v.verdict == "breach":
            # Proved on the log's count over the target, however few its requests.
            kw["note"] = f"{kw['note']}; {v.reason}" if kw.get("note") else v.reason
            fits, verdict = False, "does_not_fit"
        elif v is not None and v.verdict == "pass":
            pass
        elif gate is not None and n is not None and (v is not None or n < min_rows(obj.percentile)):
            # The audit's rule on the log this figure was measured on: too few values
            # beyond the percentile for a verdict, so it neither fits nor gates.
            gaps = obj.metric == "itl" and self.llm is not None and self.llm[1].itl is not None
            what = "gaps" if gaps else "requests"
            said = f"inconclusive: {v.reason}" if v else thin_note(n, obj.percentile, what)
            kw["note"] = f"{kw['note']}; {said}" if kw.get("note") else said
            # A gated e2e figure of the log's requests is the plan's gate: said there.
            gate_said = obj.metric == "e2e" and self.by_requests and obj.gated
            if not fits and not gate_said:
                self.problems.append(thin_problem(obj.key, fmt_ms(gate), limit, said))
            fits, verdict = None, "inconclusive"
        return ObjectiveCheck(
            metric=obj.metric,
            percentile=obj.percentile,
            target_ms=obj.target_ms,
            limit_ms=round(limit, 3),
            additive_ms=None if add is None else round(add, 3),
            composed_ms=None if comp is None else round(comp, 3),
            fits=fits,
            gated=obj.gated,
            verdict=verdict,
            n=n,
            **kw,
        )

    def _count(self, obj: Objective) -> int | None:
        """How many values the objective's figure was measured on: the llm: block's `n`
        for its distributions, else the log's requests (composition.measured) for a figure
        of a measured budget; None for a stated one."""
        measured = self.b.composition.measured
        requests = measured.requests if measured is not None else None
        spec = self.llm[1] if self.llm is not None else None
        if obj.metric == "e2e":
            return requests if self.by_requests or obj.output_tokens is not None else None
        if obj.metric in ("ttft", "tpot", "itl") and spec is not None:
            spread = {"ttft": spec.ttft, "tpot": spec.tpot, "itl": spec.itl or spec.tpot}
            got = spread[obj.metric]
            if got is not None and got.n is not None:
                return got.n
            # Gaps are many per request: without their count, a request count says nothing.
            return requests if got is not None and obj.metric != "itl" else None
        return requests if obj.metric not in ("ttft", "tpot", "itl") else None

    def _over(self, obj: Objective, row: ObjectiveCheck, what: str, fix: str) -> None:
        assert row.additive_ms is not None
        headroom = f" less {self.b.headroom:.0%} headroom" if self.b.headroom else ""
        self.problems.append(
            Problem(
                severity="error" if obj.gated else "warning",
                metric=obj.metric,
                percentile=obj.percentile,
                stage=row.stage,
                message=(
                    f"{obj.key}{'' if obj.gated else ' (not gated)'}: {what} = "
                    f"{fmt_ms(row.additive_ms)}, {fmt_ms(row.additive_ms - row.limit_ms)} over "
                    f"the {fmt_ms(row.limit_ms)} limit (target {fmt_ms(obj.target_ms)}"
                    f"{headroom}); {fix}"
                ),
            )
        )

    def _e2e(self, obj: Objective, e2e: dict[str, tuple[float, float]]) -> ObjectiveCheck:
        add, comp = e2e[obj.percentile]
        if obj.output_tokens is None:
            # A gated e2e breach is reported by plan.py (the slices and the largest one).
            if self.by_requests:
                note = "gated on the log's whole requests (composition.measured)"
                row = self._row(obj, add, comp, gate=comp, note=note)
            else:
                row = self._row(obj, add, comp, note="slices at the budget's own answer length")
            if row.fits is False and not obj.gated and not self.by_requests:
                self._over(obj, row, "the slices", "shrink the largest slice")
            return row
        assert self.llm is not None  # the budget model requires an llm stage for this
        stage, spec = self.llm
        row = self._row(obj, add, comp, stage=stage.name, output_tokens=obj.output_tokens)
        if row.fits is False:
            self._over(
                obj,
                row,
                f"the slices with {stage.name} answering {obj.output_tokens:,} tokens "
                f"(TTFT {fmt_ms(spec.ttft_ms)} + {obj.output_tokens - 1:,} x "
                f"{fmt_ms(1000.0 / spec.tokens_per_s)})",
                "raise tokens/s, cap the answer length, or relax slo.e2e",
            )
        return row

    def _ttft(self, obj: Objective) -> ObjectiveCheck:
        if self.llm is None:
            self.problems.append(_unchecked(obj, "an llm: block with ttft_ms"))
            return self._row(obj, None, None, note="no llm: block in the pipeline")
        stage, spec = self.llm
        items, names = before(self.b, stage)
        # A `ttft` stage before the call is its TTFT: the block's is the same time, not more.
        held = ttft_holder(self.b, stage)
        own = 0.0 if held else spec.ttft_at(obj.percentile)
        parts = [_additive(self.b, self.fits, item, obj.percentile) for item in items]
        add = self.b.overhead_ms + own + sum(parts)
        names = [f"{n} {fmt_ms(v)}" for n, v in zip(names, parts, strict=True)]
        if self.b.overhead_ms:
            names.insert(0, f"overhead {fmt_ms(self.b.overhead_ms)}")
        own_node: Node = ("stage", Constant(0.0) if held else ttft_distribution(spec))
        tree: Node = ("seq", [*(node_of(self.fits, i) for i in items), own_node])
        alone = held and len(items) == 1 and isinstance(items[0], m.Stage)
        if alone:
            # TTFT is the one stage before the call: its own distribution, exactly (a Monte
            # Carlo would print the measured 362.1 ms as 363).
            comp = self.b.overhead_ms + float(self.fits[items[0].name].ppf(obj.q))
        else:
            comp = float(
                monte_carlo(
                    tree,
                    samples=self.samples,
                    seed=self.seed,
                    correlation=self.b.composition.correlation,
                    overhead_ms=self.b.overhead_ms,
                    quantiles=[obj.q],
                )[0]
            )
        steps = " + ".join(names if held else [*names, f"{stage.name} TTFT {fmt_ms(own)}"])
        if held:
            steps += f", the {held} stage, which holds {stage.name}'s TTFT"
        row = self._row(obj, add, comp, stage=stage.name, note=steps)
        if row.fits is False:
            fix = (
                f"cut {stage.name}'s TTFT (queueing: add capacity or limit concurrency; "
                "prefill: shorter prompts, prefix caching, chunked prefill)"
                if held or own >= add - own
                else f"shrink the slices before {stage.name}"
            )
            self._over(obj, row, f"time to first token ({steps})", fix)
        return row

    def _decode(self, obj: Objective) -> ObjectiveCheck:
        if self.llm is None:
            self.problems.append(_unchecked(obj, "an llm: block with tokens_per_s"))
            return self._row(obj, None, None, note="no llm: block in the pipeline")
        stage, spec = self.llm
        p = obj.percentile
        value, note = _decode_figure(stage.name, spec, obj.metric, p)
        row = self._row(obj, value, value, stage=stage.name, note=note)
        if row.fits is False and spec.tpot is None:
            self._over(
                obj,
                row,
                f"{stage.name} decoding at {spec.tokens_per_s:g} tok/s gives {obj.metric.upper()}",
                f"raise tokens/s to at least {1000.0 / row.limit_ms:,.1f} (speculative "
                "decoding, fewer concurrent decoders, a smaller or quantized model) "
                f"or relax slo.{obj.metric}.{obj.percentile}",
            )
        elif row.fits is False:
            self._over(
                obj,
                row,
                f"{stage.name}'s {obj.metric.upper()} at {p}",
                f"bring {stage.name}'s {obj.metric.upper()} {p} under {fmt_ms(row.limit_ms)} "
                "(speculative decoding, fewer concurrent decoders, a smaller or quantized "
                f"model) or relax slo.{obj.metric}.{p}",
            )
        return row

    def _stage(self, obj: Objective) -> ObjectiveCheck:
        stage = self.b.stage(obj.metric)
        if stage is None:
            self.problems.append(
                Problem(
                    severity="error",
                    metric=obj.metric,
                    percentile=obj.percentile,
                    message=(
                        f"slo.stages.{obj.metric}: the pipeline has no stage {obj.metric!r}; "
                        "fix the name or add the stage"
                    ),
                )
            )
            return self._row(obj, None, None, note="no such stage in the pipeline")
        points = stage_points(stage, self.b.gated)
        add = points.get(obj.percentile, self.fits[stage.name].ppf(obj.q))
        row = self._row(obj, add, self.fits[stage.name].ppf(obj.q), stage=stage.name)
        if row.fits is False:
            self._over(obj, row, f"{stage.name}'s {obj.percentile} slice", "shrink the slice")
        return row


def _unchecked(obj: Objective, needs: str) -> Problem:
    return Problem(
        severity="warning",
        metric=obj.metric,
        percentile=obj.percentile,
        message=(
            f"{obj.key}: not checked: the plan needs {needs} to estimate {obj.metric}; "
            "`tailbudget audit` checks it on a log"
        ),
    )


def ttft_distribution(spec: m.LLMSpec) -> Distribution:
    if spec.ttft is None:
        return Constant(spec.ttft_ms)
    points = {p: max(v, FLOOR_MS) for p, v in spec.ttft.given().items()}
    return fit_stage(points) if len(points) > 1 else Constant(next(iter(points.values())))


def _decode_figure(name: str, spec: m.LLMSpec, metric: str, p: str) -> tuple[float, str]:
    """TPOT or ITL at percentile `p`: the block's own distribution of that metric when it
    states one (each at its own percentile, as the audit measures them)."""
    if metric == "itl" and spec.itl is not None:
        return spec.itl.at(p), f"{name}'s measured ITL distribution (every inter-token gap)"
    if spec.tpot is not None:
        note = f"{name}'s TPOT distribution at {p}"
        if metric == "itl":
            note += "; the block states no ITL, so TPOT stands in (single gaps spread wider)"
        return spec.tpot.at(p), note
    note = f"{name} at {spec.tokens_per_s:g} tok/s, the same at every percentile"
    if metric == "itl":
        note += "; the plan knows the mean gap only, a log shows the spread of gaps"
    return 1000.0 / spec.tokens_per_s, note


def _additive(budget: m.Budget, fits: dict[str, Distribution], item: Any, p: str) -> float:
    if isinstance(item, m.Stage):
        points = stage_points(item, budget.gated)
        return points[p] if p in points else fits[item.name].ppf(quantile_of(p))
    if isinstance(item, m.Parallel):
        return max(_additive(budget, fits, i, p) for i in item.parallel)
    return sum(_additive(budget, fits, i, p) for i in item.sequence)


def node_of(
    fits: dict[str, Distribution], item: Any, swap: dict[str, Distribution] | None = None
) -> Node:
    if isinstance(item, m.Stage):
        return ("stage", (swap or {}).get(item.name, fits[item.name]))
    if isinstance(item, m.Parallel):
        return ("par", [node_of(fits, i, swap) for i in item.parallel])
    return ("seq", [node_of(fits, i, swap) for i in item.sequence])


def e2e_figures(
    budget: m.Budget,
    fits: dict[str, Distribution],
    add: dict[str, float],
    comp: dict[str, float],
    *,
    samples: int,
    seed: int,
) -> dict[str, tuple[float, float]]:
    """(additive, composed) end-to-end ms per percentile, at N tokens when the SLO says so."""
    tokens = budget.objectives.e2e_output_tokens()
    llm = streamed(budget)
    if tokens is None or llm is None:
        return {p: (add[p], comp[p]) for p in add}
    stage, spec = llm
    # With a `ttft` stage holding the call's TTFT, the call's own stage is decode only.
    ttft = 0.0 if ttft_holder(budget, stage) else spec.ttft_ms
    call = ttft + (tokens - 1) * 1000.0 / spec.tokens_per_s + spec.tail_ms
    points = stage_points(stage, budget.gated)
    names = list(add)
    # Swap the LLM stage's slice for its time at N tokens: sequence sums shift by the
    # difference, and the Monte Carlo reruns with the stage fixed at that time.
    tree: Node = ("seq", [node_of(fits, i, {stage.name: Constant(call)}) for i in budget.pipeline])
    qs = monte_carlo(
        tree,
        samples=samples,
        seed=seed,
        correlation=budget.composition.correlation,
        overhead_ms=budget.overhead_ms,
        quantiles=[quantile_of(p) for p in names],
    )
    out: dict[str, tuple[float, float]] = {}
    for p, q in zip(names, qs, strict=True):
        own = points[p] if p in points else fits[stage.name].ppf(quantile_of(p))
        out[p] = (add[p] - own + call, float(q))
    return out


def check_objectives(
    budget: m.Budget,
    fits: dict[str, Distribution],
    e2e: dict[str, tuple[float, float]],
    *,
    samples: int,
    seed: int,
    by_requests: bool = False,
) -> tuple[list[ObjectiveCheck], list[Problem]]:
    """Every objective of the budget against the plan, and the problems it raises.

    Plain e2e objectives get rows only: their problems are the slices messages of plan.py.
    `by_requests`: e2e objectives gate on the composed figure (the log's whole requests)."""
    checker = _Checker(budget, fits, samples=samples, seed=seed, by_requests=by_requests)
    rows = [checker.check(o, e2e) for o in budget.objectives]
    return rows, checker.problems
