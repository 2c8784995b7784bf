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
    return out + _canary(r)


def _canary(r: AuditReport) -> list[str]:
    c = r.canary
    if c is None:
        return []
    out = [
        "",
        f"Canary against the baseline: **{c.verdict}**: {c.text} (95% bootstrap interval of "
        f"the change; one-sided Mann-Whitney U; under {c.min_requests:,} points a side: "
        "inconclusive).",
        "",
        "| objective | before ms | after ms | change ms | 95% interval | p-value "
        "| n before / after | verdict |",
        "|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for o in c.objectives:
        interval = "-" if o.ci_low is None else f"[{o.ci_low:+,.1f}, {o.ci_high:+,.1f}]"
        change = "-" if o.change_ms is None else f"{o.change_ms:+,.1f}"
        p = "-" if o.p_value is None else f"{o.p_value:.3g}"
        out.append(
            f"| {o.metric} {o.percentile} | {_ms(o.before_ms)} | {_ms(o.after_ms)} | {change} | "
            f"{interval} | {p} | {o.n_before:,} / {o.n_after:,} | {o.verdict} |"
        )
    g = c.goodput
    if g is not None:
        out += [
            "",
            f"Goodput {g.before:.1%} -> {g.after:.1%} ({g.change:+.1%}, 95% interval "
            f"[{g.ci_low:+.1%}, {g.ci_high:+.1%}]): {g.verdict}.",
        ]
    return out
