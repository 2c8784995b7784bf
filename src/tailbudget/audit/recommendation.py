"""Step 9: what to do first.

- none: every SLO percentile given passes.
- add_capacity: contention is the best-ranked cause (or, unranked, a contention hypothesis
  exists): the tail is load, and capacity is the quick lever.
- renegotiate_slo: the p50 breaches without contention (the typical request misses; no
  tail fix reaches it), or the ranked fixes together save less than a third of the
  p99 breach, or a breach has no hypothesis at all.
- fix_tail: otherwise; the text names the first fix, what to do when its hypothesis has a
  covariate and a cap (e.g. set max_tokens to the output length's p95), and what it saves.
"""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget.audit.fixes import CATALOG, action
from tailbudget.audit.report import (
    Hypothesis,
    ObjectiveRow,
    RankedFix,
    Recommendation,
    Snapshot,
)

PARTIAL = 1 / 3


def too_few(snap: Snapshot) -> list[str]:
    """Percentiles too thin for a verdict when none breaches: the "collect more" case."""
    if any(v == "breach" for v in snap.verdict.values()):
        return []
    return [p for p, v in snap.verdict.items() if v == "inconclusive"]


def recommend(
    snap: Snapshot,
    slo: dict[str, float],
    hyps: list[Hypothesis],
    ranking: list[RankedFix],
) -> Recommendation:
    """The recommendation with a sentence citing the figures.

    A thin percentile proved over its target needs no branch here: the snapshot's
    verdict is `_verdict.judge` (the one rule) on the same requests and the same count
    over the target, so it is already a breach, and `too_few` is empty."""
    breached = [p for p, v in snap.verdict.items() if v == "breach"]
    thin = too_few(snap)
    if thin:
        return Recommendation(
            choice="none",
            text=(
                f"Too few requests ({snap.count}) for a verdict on {', '.join(thin)}: "
                "collect a longer log before acting on it."
            ),
        )
    if not breached:
        figs = ", ".join(f"{p} {fmt.ms(getattr(snap, p))} ms <= {fmt.ms(slo[p])} ms" for p in slo)
        return Recommendation(
            choice="none", text=f"Every SLO target is met ({figs}); nothing to fix."
        )
    top = breached[-1]
    gap = getattr(snap, top) - slo[top]
    kinds = {h.kind for h in hyps}
    if (ranking and ranking[0].kind == "contention") or (not ranking and "contention" in kinds):
        return Recommendation(
            choice="add_capacity",
            text=(
                f"{top} is {gap:,.0f} ms over its target and latency rises with traffic: add "
                "capacity (or cap concurrency per replica) before tuning code."
            ),
        )
    if "p50" in breached:
        return Recommendation(
            choice="renegotiate_slo",
            text=(
                f"The median request already misses p50 ({snap.p50:,.0f} ms vs {slo['p50']:,.0f}): "
                "this is not a tail problem; renegotiate the SLO or redesign the pipeline."
            ),
        )
    if not hyps:
        return Recommendation(
            choice="renegotiate_slo",
            text=(
                f"{top} is {gap:,.0f} ms over its target and no cause stands out in this log; "
                "either instrument more stages or renegotiate the target."
            ),
        )
    if ranking:
        saved = sum(r.p99_saved_ms for r in ranking)
        first = ranking[0]
        if top == "p99" and saved < PARTIAL * gap:
            return Recommendation(
                choice="renegotiate_slo",
                text=(
                    f"p99 is {fmt.ms(gap)} ms over target but every ranked fix together saves "
                    f"about {fmt.ms(saved)} ms: renegotiate the SLO, then apply {first.fix}."
                ),
            )
        where = f" on {first.stage}" if first.stage else ""
        what = _action(first, hyps)
        return Recommendation(
            choice="fix_tail",
            text=(
                f"{top} is {gap:,.0f} ms over target. Start with {first.fix}{where}"
                f"{f' ({what})' if what else ''}: it saves "
                f"about {first.p99_saved_ms:,.0f} ms of p99 for {first.hours:g} engineering hours "
                f"({first.risk} risk{', reversible' if first.reversible else ''})."
            ),
        )
    kinds_s = ", ".join(sorted(kinds))
    return Recommendation(
        choice="fix_tail",
        text=f"{top} is {gap:,.0f} ms over target; the tail has a cause ({kinds_s}): fix it.",
    )


def _action(fix: RankedFix, hyps: list[Hypothesis]) -> str:
    """The ranked fix's action in words, from the hypothesis it answers."""
    h = next((h for h in hyps if h.kind == fix.kind and h.stage == fix.stage), None)
    entry = CATALOG.get(fix.fix)
    return action(entry, h.covariate, h.figures) if h is not None and entry is not None else ""


def none_from_objectives(
    rec: Recommendation, rows: list[ObjectiveRow], e2e_cited: bool
) -> Recommendation:
    """A "none" that says what the gated objectives say, not only the e2e percentiles.

    The e2e rule sees only the p50/p95/p99 targets: with TTFT or TPOT objectives alone it
    had no figure to cite ("Every SLO target is met ()") and called met an objective the
    data leave inconclusive. `e2e_cited`: the SLO had e2e targets for its text to cite.
    """
    gated = [o for o in rows if o.gated]
    if rec.choice != "none" or not gated or any(o.verdict == "breach" for o in gated):
        return rec
    open_ = [o for o in gated if o.verdict in ("inconclusive", "no_data")]
    if open_:
        words = "; ".join(_unsettled(o) for o in open_)
        return Recommendation(
            choice="none",
            text=(
                f"No gated objective is proved breached, but not every one is met: {words}. "
                "Collect more requests before acting on it."
            ),
        )
    if e2e_cited:
        return rec
    figs = ", ".join(
        f"{o.metric}.{o.percentile} {fmt.ms(o.measured_ms or 0.0)} ms <= {fmt.ms(o.target_ms)} ms"
        for o in gated
    )
    text = f"Every gated objective is met ({figs}); nothing to fix."
    return Recommendation(choice="none", text=text)


def _unsettled(o: ObjectiveRow) -> str:
    key = f"{o.metric}.{o.percentile}"
    if o.verdict == "no_data" or o.measured_ms is None:
        return f"{key} has no data"
    what = "gap" if o.metric == "itl" else "request"
    more = f", about {fmt.counted(o.more, 'more ' + what)} would settle it" if o.more else ""
    return (
        f"{key} inconclusive ({fmt.ms(o.measured_ms)} ms against {fmt.ms(o.target_ms)} ms "
        f"on {fmt.counted(o.n or 0, what)}{more})"
    )
