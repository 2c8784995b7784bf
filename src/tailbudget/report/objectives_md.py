"""The audit's objectives section in markdown: every objective's target, measured figure
and verdict, goodput, and the cause found for each breached objective."""

from __future__ import annotations

from tailbudget.audit.report import AuditReport, ObjectiveRow

__all__ = ["objectives_section"]


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"


def _name(o: ObjectiveRow) -> str:
    name = f"{o.metric} {o.percentile}"
    return name + (f" at {o.output_tokens:,} tokens" if o.output_tokens else "")


def objectives_section(r: AuditReport) -> list[str]:
    """Rows of the objectives table, goodput and the drivers of breached objectives."""
    if not r.objectives:
        return ["No objectives were given."]
    out = [
        "| objective | target ms | measured ms | verdict | gated | from |",
        "|---|---:|---:|---|---|---:|",
    ]
    for o in r.objectives:
        unit = "gaps" if o.metric == "itl" else "requests"
        out.append(
            f"| {_name(o)} | {_ms(o.target_ms)} | {_ms(o.measured_ms)} | {o.verdict} | "
            f"{'yes' if o.gated else 'no'} | {o.n:,} {unit} |"
        )
    out.append("")
    g = r.goodput
    if g.thresholds:
        within = ", ".join(f"{m} <= {_ms(ms)} ms" for m, ms in g.thresholds.items())
        minimum = f" (minimum {g.min:.1%}: {g.verdict})" if g.min is not None else ""
        count = f"{g.good:,} of {g.requests:,} requests" if g.requests is not None else ""
        out.append(f"Goodput {g.share:.1%}{minimum}: {count} are not errors and meet {within}.")
        out.append("")
    out += [f"- {o.metric} {o.percentile}: {o.note}" for o in r.objectives if o.note]
    causes = [h for h in r.hypotheses if h.objective is not None]
    if causes:
        out += ["", "What drives each breached objective:", ""]
        out += [f"- **{h.objective}**: {h.evidence}" for h in causes]
    fixes = [f for f in r.ranking if f.objective is not None]
    for f in fixes:
        goodput = ""
        if f.goodput_before is not None and f.goodput_after is not None:
            goodput = f"; goodput {f.goodput_before:.1%} -> {f.goodput_after:.1%}"
        out.append(
            f"- fix {f.fix}: {f.objective} {_ms(f.objective_before_ms)} -> "
            f"{_ms(f.objective_after_ms)} ms{goodput} ({f.counterfactual})"
        )
    return out
