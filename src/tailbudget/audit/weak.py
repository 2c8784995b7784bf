"""Small samples: which findings rest on too few requests to act on.

The slow group (by default the requests between the p95 and the p99 of the total) is
what the tail driver, the hypotheses and the ranking are drawn from. Below
MIN_SLOW_REQUESTS requests in it, a mean difference or a rule firing is as likely
noise as a cause: those findings are marked weak in every format, no fix is ranked
on them, and the recommendation says so. The same count applies per cohort (its
requests in the slow group) and to the cold windows of a cold-start finding.
"""

from __future__ import annotations

import math

from tailbudget.audit import recommendation
from tailbudget.audit.report import AuditReport, Hypothesis, Recommendation

MIN_SLOW_REQUESTS = 20
"""Fewest requests in the slow group (or a cohort's share of it, or the cold windows)
for a finding drawn from it to count as more than weak. Shared by every audit step that
reports per-group findings."""


def too_few(n: int | float) -> bool:
    """True when `n` requests are too few for a finding (below MIN_SLOW_REQUESTS)."""
    return n < MIN_SLOW_REQUESTS


def why(n: int | float, group: str = "the slow group") -> str:
    """The caveat in words, with the count and the documented minimum."""
    return (
        f"only {n:,.0f} requests in {group} (fewer than {MIN_SLOW_REQUESTS}): "
        "a weak finding, too few to rank fixes on"
    )


def _hypothesis(h: Hypothesis, slow_weak: bool) -> Hypothesis:
    n_cold = h.figures.get("n_cold")
    # A cause of a breached objective (TTFT queueing...) is drawn from every request, not
    # from the slow group: the slow group's size does not weaken it.
    from_slow = h.objective is None
    weak = (slow_weak and from_slow) or (
        h.kind == "cold_start" and n_cold is not None and too_few(n_cold)
    )
    return h.model_copy(update={"weak": True}) if weak and not h.weak else h


def _weak_text(report: AuditReport, hyps: list[Hypothesis], n: int) -> str:
    """A weak breach still names the objective, the action it points to and the data that
    would confirm it: never a bare "none"."""
    over = [
        f"{o.metric} {o.percentile} is {o.measured_ms - o.target_ms:,.0f} ms over its "
        f"{o.target_ms:,.0f} ms target"
        for o in report.objectives
        if o.gated and o.verdict == "breach" and o.measured_ms is not None
    ]
    head = "; ".join(over) or "A gated objective breaches"
    first = report.ranking[0] if report.ranking else None
    if first is not None:
        where = f" on {first.stage}" if first.stage else ""
        # Its counterfactual saves end-to-end p99: a figure for an e2e p99 breach only (a
        # p95 breach read "272 ms of p99" where rebudget prices the fix at p95).
        p99 = any(
            o.metric == "e2e" and o.percentile == "p99"
            for o in report.objectives
            if o.gated and o.verdict == "breach"
        )
        saves = (
            f": about {first.p99_saved_ms:,.0f} ms of e2e p99 by its counterfactual" if p99 else ""
        )
        lead = f"the best-supported action, {first.fix}{where} (for {first.kind}{saves}), is a lead"
    elif found := [h for h in hyps if not h.undetermined]:
        h = found[0]
        lead = f"the best-supported cause, {h.kind}{f' on {h.stage}' if h.stage else ''}, is a lead"
    else:
        # An undetermined cause is a candidate the figures cannot tell from the others:
        # never "best-supported". The slow requests' driver stage is what there is.
        driver = report.tail.driver
        lead = (
            f"the tail's driver, {driver} (the stage slow requests spend the most extra time "
            "in), is a lead"
            if driver
            else "any cause named here is a lead"
        )
    rows = report.snapshot.count
    need = math.ceil(rows * MIN_SLOW_REQUESTS / max(n, 1)) if rows else 0
    return (
        f"{head}. Only {n:,} requests in the slow group (fewer than {MIN_SLOW_REQUESTS}), so "
        f"{lead}, not a finding: confirm it with a log of at least {need:,} requests (for "
        f"{MIN_SLOW_REQUESTS} slow ones) or a fault-free baseline of the same service before "
        "acting."
    )


def mark(report: AuditReport) -> AuditReport:
    """The report with weak findings marked; with a weak slow group, fixes are not ranked."""
    n = report.tail.n_slow
    slow_weak = too_few(n) and bool(report.tail.deltas or report.hypotheses)
    hyps = [_hypothesis(h, slow_weak) for h in report.hypotheses]
    if not slow_weak:
        return report.model_copy(update={"hypotheses": hyps})
    caveat = why(n)
    rec = report.recommendation
    # A fix of a breached objective stands on every request: its recommendation stays.
    objective_fix = any(f.objective is not None for f in report.ranking)
    if rec.choice != "none" and not objective_fix and not report.breaches_gate():
        rec = rec.model_copy(update={"weak": True})  # a thin log's sure miss says so itself
    elif rec.choice != "none" and not objective_fix and not rec.weak:
        # (A recommendation already weak, as a goodput breach's, states its own caveat.)
        slo = {k: v for k, v in report.slo.model_dump().items() if v is not None}
        plain = recommendation.recommend(report.snapshot, slo, hyps, [])
        # A breach of a non-e2e objective leaves the e2e snapshot passing: keep the choice.
        choice = plain.choice if plain.choice != "none" else rec.choice
        rec = Recommendation(choice=choice, weak=True, text=_weak_text(report, hyps, n))
    refusals = list(report.refusals)
    kept = [f for f in report.ranking if f.objective is not None]
    if kept and len(kept) < len(report.ranking):
        refusals.append(
            f"fixes not ranked from the slow group: {caveat}; the fixes of breached "
            "objectives, drawn from every request, are ranked"
        )
    elif len(kept) < len(report.ranking):
        refusals.append(f"fixes not ranked: {caveat}")
    return report.model_copy(
        update={
            "tail": report.tail.model_copy(update={"weak": True}),
            "hypotheses": hyps,
            "ranking": kept,
            "refusals": refusals,
            "recommendation": rec,
        }
    )


__all__ = ["MIN_SLOW_REQUESTS", "mark", "too_few", "why"]
