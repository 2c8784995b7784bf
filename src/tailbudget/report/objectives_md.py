"""The audit's objectives section in markdown: every objective's target, measured figure
and verdict, goodput, and the cause found for each breached objective."""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget.audit.report import AuditReport, ObjectiveRow

__all__ = ["objectives_section"]

_ms = fmt.ms


def _name(o: ObjectiveRow) -> str:
    name = f"{o.metric} {o.percentile}"
    return name + (f" at {fmt.count(o.output_tokens)} tokens" if o.output_tokens else "")


DEFINITIONS = {
    "e2e": "e2e is each request's end-to-end time",
    "ttft": "ttft its time to first token",
    "tpot": "tpot (e2e - ttft) / (output tokens - 1), vLLM's definition (0 for one token)",
    "itl": "itl every gap between two tokens",
}


def definitions(rows: list[ObjectiveRow]) -> str:
    """What each measured figure of the objectives table is, for the metrics it holds."""
    metrics = list(dict.fromkeys(o.metric for o in rows))
    said = [DEFINITIONS[m] for m in metrics if m in DEFINITIONS]
    stages = [m for m in metrics if m not in DEFINITIONS]
    if stages:
        said.append(f"{', '.join(stages)} the time each request spends in that stage")
    over = "the requests (the gaps, for itl)" if "itl" in metrics else "the requests"
    return "; ".join(said) + f"; each at its percentile over {over} the last column counts"


def objectives_section(r: AuditReport) -> list[str]:
    """Rows of the objectives table, goodput and the drivers of breached objectives."""
    if not r.objectives:
        return ["No objectives were given."]
    out = [
        "| objective | target ms | measured ms | verdict | gated | from |",
        "|---|---:|---:|---|---|---:|",
    ]
    for o in r.objectives:
        unit = "gap" if o.metric == "itl" else "request"
        out.append(
            f"| {_name(o)} | {_ms(o.target_ms)} | {_ms(o.measured_ms)} | {o.verdict} | "
            f"{'yes' if o.gated else 'no'} | {fmt.counted(o.n or 0, unit)} |"
        )
    out += ["", f"Measured as: {definitions(r.objectives)}.", ""]
    g = r.goodput
    if g.thresholds:
        within = ", ".join(f"{m} <= {_ms(ms)} ms" for m, ms in g.thresholds.items())
        minimum = f" (minimum {fmt.share(g.min)}: {g.verdict})" if g.min is not None else ""
        count = (
            f"{fmt.count(g.good)} of {fmt.count(g.requests)} requests"
            if g.requests is not None
            else ""
        )
        out.append(
            f"Goodput {fmt.share(g.share)}{minimum}: {count} are not errors and meet {within}."
        )
        out.append("")
    out += [f"- {o.metric} {o.percentile}: {o.note}" for o in r.objectives if o.note]
    causes = [h for h in r.hypotheses if h.objective is not None]
    drivers = [o for o in r.objectives if o.driver]
    if causes or drivers:
        out += ["", "What drives each breached objective:", ""]
        out += [f"- **{o.metric}.{o.percentile}**: {o.driver}" for o in drivers]
        out += [f"- **{h.objective}**: {h.evidence}" for h in causes]
    fixes = [f for f in r.ranking if f.objective is not None]
    for f in fixes:
        goodput = f"; {f.goodput_words()}" if f.goodput_words() else ""
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
        f"the change; one-sided Mann-Whitney U; under {fmt.count(c.min_requests)} points a side: "
        "inconclusive).",
        "",
        "| objective | before ms | after ms | change ms | 95% interval | p-value "
        "| n before / after | verdict |",
        "|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for o in c.objectives:
        interval = (
            "-" if o.ci_low is None else f"[{fmt.signed_ms(o.ci_low)}, {fmt.signed_ms(o.ci_high)}]"
        )
        change = fmt.signed_ms(o.change_ms)
        p = fmt.number(o.p_value)
        out.append(
            f"| {o.metric} {o.percentile} | {_ms(o.before_ms)} | {_ms(o.after_ms)} | {change} | "
            f"{interval} | {p} | {fmt.count(o.n_before)} / {fmt.count(o.n_after)} | {o.verdict} |"
        )
    g = c.goodput
    if g is not None:
        out += [
            "",
            f"Goodput {fmt.share(g.before)} -> {fmt.share(g.after)} ({fmt.signed_share(g.change)}, "
            f"95% interval [{fmt.signed_share(g.ci_low)}, {fmt.signed_share(g.ci_high)}]): "
            f"{g.verdict}.",
        ]
    return out


def _plain(text: str) -> str:
    """A class value from the log as one table cell: code-spanned, pipes and breaks folded."""
    flat = " ".join(str(text).replace("|", "/").replace("`", "'").split())
    return f"`{flat}`"


def classes_section(r: AuditReport) -> list[str]:
    """Objectives per class: each class's objectives measured on its own requests, its
    goodput and the stage that slows its own slow requests."""
    if r.classes is None:
        return []
    if not r.classes:
        return [f"No request carries a class in column `{r.class_by}`."]
    out = [
        f"Each class (column `{r.class_by}`) is measured on its own requests, with the same "
        "verdict rule as the whole service; its driver is the stage with the largest "
        "slow-vs-fast delta among its own requests.",
        "",
        "| class | requests | share | objective | target ms | measured ms | verdict | gated "
        "| driver |",
        "|---|---:|---:|---|---:|---:|---|---|---|",
    ]
    for c in r.classes:
        name = _plain(c.name) + ("" if c.listed else " (not listed: service-wide)")
        driver = "-" if c.driver is None else f"{c.driver} (+{_ms(c.driver_delta_ms)} ms)"
        for i, o in enumerate(c.objectives or []):
            head = [name, fmt.count(c.requests), fmt.share(c.share)] if i == 0 else ["", "", ""]
            out.append(
                f"| {' | '.join(head)} | {_name(o)} | {_ms(o.target_ms)} | "
                f"{_ms(o.measured_ms)} | {o.verdict} | {'yes' if o.gated else 'no'} | "
                f"{driver if i == 0 else ''} |"
            )
    said = [
        f"- class {_plain(c.name)}: goodput {fmt.share(c.goodput.share)} "
        f"(minimum {fmt.share(c.goodput.min)}: {c.goodput.verdict})"
        for c in r.classes
        if c.goodput.min is not None
    ]
    said += [
        f"- class {_plain(c.name)} {o.metric}.{o.percentile}: {o.driver}"
        for c in r.classes
        for o in c.objectives
        if o.driver
    ]
    said += [f"- class {_plain(c.name)}: {c.note}" for c in r.classes if c.note]
    return out + (["", *said] if said else [])
