"""What every audit renderer shows the same way: titles, folded fits, weak marks, verdicts.

Markdown and HTML both read these, so a finding has one verdict and one wording of
its caveat wherever it appears.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailbudget import _fmt as fmt
from tailbudget.audit.report import AuditReport, ColdStart, Hypothesis, RankedFix, ShapeRow
from tailbudget.audit.weak import MIN_SLOW_REQUESTS

SHOWN_FITS = 12
"""Shape fits listed in full; weaker ones are folded (the JSON has all of them)."""

WEAK = "weak"
"""The mark on a finding drawn from too few requests."""


STAGE_RATIO = "p99 / e2e p99"
"""The stage table's `share_of_p99` column: a ratio of two percentiles, not a share."""
STAGE_RATIO_NOTE = (
    "Each stage's own p99 over the end-to-end p99: different requests make each stage"
    "'s tail, so these ratios are not parts of a whole and need not add up to 100%."
)


CULPRIT_SCORE = (
    "Score (0 to 1) weighs three figures: the stage's part of the slow-vs-fast gap, its "
    "growth against the baseline or an event, and its part of the slow requests' time; "
    "each is a different share, so they differ."
)


def hypothesis_text(h: Hypothesis) -> str:
    """A hypothesis's evidence, once: an objective's cause is stated under Objectives, so the
    Hypotheses section points there instead of repeating its figures."""
    if h.objective and h.undetermined:
        return (
            f"a candidate for the {h.objective} breach, not a finding (its cause is "
            "undetermined on this log): its figures are under Objectives"
        )
    if h.objective:
        return f"the cause of the {h.objective} breach: its figures are under Objectives"
    return h.evidence


_WORD = {
    "breach": "over target",
    "pass": "within target",
    "inconclusive": "inconclusive (too few requests)",
}


def verdict_line(r: AuditReport) -> str:
    """Every gated objective's verdict in one sentence, breaches first: the report's
    headline. Figures are stated once, in the objectives table beside their definitions."""
    rows = sorted((o for o in r.objectives if o.gated), key=lambda o: o.verdict != "breach")
    groups: dict[str, list[str]] = {}
    for o in rows:
        how = "no data" if o.measured_ms is None else _WORD.get(o.verdict, o.verdict)
        groups.setdefault(how, []).append(f"{o.metric}.{o.percentile}")
    if r.goodput.verdict != "no_minimum" and r.goodput.min is not None:
        words = {
            "breach": "under its minimum",
            "pass": "at or above its minimum",
            "inconclusive": "under its minimum by less than the requests prove",
        }
        groups.setdefault(words.get(r.goodput.verdict, r.goodput.verdict), []).append("goodput")
    for c, o in r.class_breaches():
        groups.setdefault("over target", []).append(f"class {c.name} {o.metric}.{o.percentile}")
    if "over target" in groups:  # breaches first, a class's among them
        groups = {"over target": groups.pop("over target"), **groups}
    head = "Breach" if r.breaches_gate() else "No gated breach"
    if not groups:
        return f"{head}: no gated objective."
    parts = "; ".join(f"{_and(keys)} {how}" for how, keys in groups.items())
    return f"{head}: {parts} (each figure, with its definition, under Objectives)."


def _and(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"


RANKING_HEAD = ("ms saved", "after (ms)", "ms saved an hour")
"""The ranking's figure columns: each on the objective the fix is for (e2e p99 unless the
row names another), so the saving, the figure after and the score read one objective."""


def ranking_figures(f: RankedFix) -> tuple[str, str]:
    """(ms saved, figure after) of a ranked fix, each naming its objective."""
    before, after = f.objective_before_ms, f.objective_after_ms
    if f.objective and before is not None and after is not None:
        return (f"{fmt.ms(before - after)} ({f.objective})", f"{fmt.ms(after)} ({f.objective})")
    return (f"{fmt.ms(f.p99_saved_ms)} (e2e p99)", f"{fmt.ms(f.p99_after_ms)} (e2e p99)")


def title(report: AuditReport) -> str:
    """The report's title: the service's name when known, else the log's file name."""
    return f"Latency audit: {report.name()}"


def fold(flags: Sequence[bool]) -> tuple[list[int], list[int]]:
    """(shown, folded) positions of fits ordered strongest first: flagged fits and the
    strongest others up to SHOWN_FITS are shown, the rest folded."""
    flagged = [i for i, f in enumerate(flags) if f]
    others = [i for i, f in enumerate(flags) if not f]
    shown = set(flagged + others[: max(0, SHOWN_FITS - len(flagged))])
    return sorted(shown), [i for i in range(len(flags)) if i not in shown]


def split_fits(rows: list[ShapeRow]) -> tuple[list[ShapeRow], list[ShapeRow]]:
    """(shown, folded) shape fits, as `fold` decides."""
    shown, folded = fold([s.flag for s in rows])
    return [rows[i] for i in shown], [rows[i] for i in folded]


def folded_note(n: int) -> str:
    """The line that stands for the folded fits."""
    return f"{n} weaker fits folded; all are in the JSON."


def tail_caveat(report: AuditReport) -> str | None:
    """Why the slow-vs-fast finding is weak, or None."""
    return tail_caveat_for(report.tail.n_slow) if report.tail.weak else None


def tail_caveat_for(n_slow: int) -> str:
    """The weak slow group's caveat, with its count and the documented minimum."""
    return (
        f"Weak: only {fmt.count(n_slow)} requests in the slow group (fewer than "
        f"{MIN_SLOW_REQUESTS}); the driver and the hypotheses below rest on too few requests."
    )


def cold_verdict(cold: ColdStart) -> str:
    """The cold-start verdict in words, from the one verdict the audit computed."""
    if cold.verdict == "no_events":
        return "No deploy or scale-up events were given, so cold start was not tested."
    change = ""
    if cold.change_share is not None:
        change = f" ({fmt.signed_ms(cold.change_ms)} ms, {fmt.share(cold.change_share)})"
    moves = (
        f"leaving out the first {cold.window_min:g} min after each event moves p99 from "
        f"{fmt.ms(cold.unfiltered_p99)} to {fmt.ms(cold.filtered_p99)} ms{change}"
    )
    if cold.verdict == "cold_start":
        return f"Cold start matters: {moves}."
    return f"Not cold start: {moves}."


def _mark(weak: bool) -> str:
    return f" ({WEAK})" if weak else ""


def summary_lines(report: AuditReport) -> list[str]:
    """The audit in a few lines (the demo's summary), with the reports' verdicts and marks."""
    r = report
    verdict = ", ".join(
        f"{p} {fmt.ms(getattr(r.snapshot, p))} ms {v}" for p, v in r.snapshot.verdict.items()
    )
    lines = [f"audit: {verdict}; tail driver {r.tail.driver}{_mark(r.tail.weak)}"]
    causes = ", ".join(f"{h.kind} ({h.stage}){_mark(h.weak)}" for h in r.hypotheses)
    lines.append(f"causes: {causes or 'none found'}")
    if r.cold_start is not None:
        # The verdict in words with its figures (it read "cold start: cold_start").
        lines.append(cold_verdict(r.cold_start).removesuffix("."))
    if r.ranking:
        f = r.ranking[0]
        lines.append(
            f"first fix: {f.fix} on {f.stage}, saves {fmt.ms(f.p99_saved_ms)} ms of p99 "
            f"for {fmt.number(f.hours)} engineering hours"
        )
    lines.append(f"recommendation: {r.recommendation.choice}{_mark(r.recommendation.weak)}")
    return lines


__all__ = [
    "SHOWN_FITS",
    "WEAK",
    "cold_verdict",
    "fold",
    "folded_note",
    "split_fits",
    "summary_lines",
    "tail_caveat",
    "tail_caveat_for",
    "title",
]
