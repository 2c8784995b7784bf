"""Rendering a re-budget proposal: JSON (the contract), markdown and plain text."""

from __future__ import annotations

from typing import Any

from tailbudget import _fmt as fmt
from tailbudget._json import dumps
from tailbudget._names import safe_markdown_renderer
from tailbudget.audit.report import RankedFix
from tailbudget.budgeting.checks import GoodputCheck
from tailbudget.budgeting.proposal import Rebudget

__all__ = ["rebudget_json", "rebudget_markdown", "rebudget_text"]


def _ms(v: float | None) -> str:
    return f"{fmt.ms(v)} ms"


def _slices(points: dict[str, float]) -> str:
    return ", ".join(f"{p} {fmt.ms(v)}" for p, v in points.items()) or "-"


def rebudget_dict(r: Rebudget) -> dict[str, Any]:
    """The JSON contract as plain values (the record's, `from` as the contract spells it)."""
    doc: dict[str, Any] = r.json_data()
    return doc


def rebudget_json(r: Rebudget) -> str:
    """The proposal as JSON text."""
    return dumps(rebudget_dict(r), explain=True)


def _verdict(r: Rebudget) -> str:
    return " ".join(x for x in (_budget_verdict(r), _e2e_line(r), _breached_line(r)) if x)


def _breached_line(r: Rebudget) -> str:
    # Slices that fit are not objectives that pass: a breached TTFT/TPOT/ITL or stage
    # objective is said in the verdict, not only in the table below it.
    said = [
        f"{o.objective} {_ms(o.measured_ms or 0.0)} against {_ms(o.target_ms)}"
        for o in r.objectives
        if o.verdict == "breach"
    ]
    g = r.goodput
    if g is not None and g.verdict == "breach" and g.min is not None:
        said.append(f"goodput {fmt.share(g.share)} against its {fmt.share(g.min)} minimum")
    if not said:
        return ""
    where = " (fixes below)" if r.objective_options or r.gaps else ""
    return f"Over target on the log: {'; '.join(said)}{where}."


def _e2e_line(r: Rebudget) -> str:
    # The budget's arithmetic adds percentiles (pessimistic); the log's own end-to-end
    # figure is what users see: say both so neither is mistaken for the other.
    parts = [
        f"{p} {_ms(r.measured_e2e[p])} against {_ms(r.slo[p])}"
        for p in r.gated
        if p in r.measured_e2e
    ]
    return f"Measured end to end: {'; '.join(parts)}." if parts else ""


def _budget_verdict(r: Rebudget) -> str:
    if r.slices_fit and _breached_line(r):
        return "Every stage is within its slice, but not every objective is met."
    if r.slices_fit and r.fits_now is None:
        thin = [o.objective for o in r.objectives if o.verdict == "inconclusive"]
        return (
            "Every stage is within its slice, but the log does not settle "
            f"{', '.join(thin)}: inconclusive, not a fit (a longer log decides it)."
        )
    if r.slices_fit:
        return "The measured service fits the budget: every stage is within its slice."
    needed = {p: v for p, v in r.speedup_needed_ms.items() if v > 0}
    if not needed:
        return "Reallocating slices is enough: the proposed budget fits what the log measures."
    gap = ", ".join(f"{_ms(v)} at {p}" for p, v in needed.items())
    one = _one_fix(r, needed)
    if one:
        return f"{one}; reallocating slices alone leaves {gap} to find."
    tail = (
        "the chosen options below close it"
        if r.closes_gap
        else "no set of up to three options below closes it: renegotiate the SLO"
    )
    return f"Reallocation is not enough: {gap} of speed-up still needed; {tail}."


def _one_fix(r: Rebudget, needed: dict[str, float]) -> str:
    """Where one ranked option closes the gap alone, the proposal leads with it (E-Shopper:
    one cache fix, where the text opened on 'reallocation is not enough')."""
    chosen = [o for o in r.options if o.chosen]
    if not r.closes_gap or len(chosen) != 1 or not r.compositions:
        return ""
    o, run = chosen[0], r.compositions[0]
    moves = [
        f"{p} from {_ms(run.before[p])} to {_ms(run.after[p])} against {_ms(r.slo[p])}"
        for p in needed
        if p in run.before and p in run.after and r.slo.get(p) is not None
    ]
    if not moves:
        return ""
    hours = fmt.counted(o.hours, "engineering hour")
    return (
        f"One fix closes the gap: {o.fix} on {', '.join(o.stages)} ({hours}, {o.risk} risk) "
        f"takes {', '.join(moves)} on the log's own requests"
    )


@safe_markdown_renderer
def rebudget_markdown(r: Rebudget) -> str:
    """The proposal as a markdown document."""
    out = [f"# Re-budget: {r.service}", "", _verdict(r), ""]
    out += ["## Objectives on the log", "", "| objective | target | measured | verdict |"]
    out += ["|---|---:|---:|---|"]
    out += [
        f"| {o.objective} | {_ms(o.target_ms)} | "
        f"{_ms(o.measured_ms) if o.measured_ms is not None else fmt.MISSING} | {o.verdict} |"
        for o in r.objectives
    ]
    if r.goodput is not None:
        out += ["", _goodput_line(r.goodput)]
    out += ["", "## Slices against the log", ""]
    out += ["| percentile | SLO | stages may use | budget | measured | speed-up needed |"]
    out += ["|---|---:|---:|---:|---:|---:|"]
    for a in r.allocations:
        out.append(
            f"| {a.percentile} | {_ms(r.slo[a.percentile])} | {_ms(a.target_ms)} | "
            f"{_ms(a.old_ms)} | {_ms(a.measured_ms)} | {_ms(a.speedup_needed_ms)} |"
        )
    out += ["", "## Changes", ""]
    if r.changes:
        out += ["| stage | from | to | reason |", "|---|---|---|---|"]
        out += [
            f"| {_cell(c.stage)} | {_slices(c.from_)} | {_slices(c.to)} | {_cell(c.reason)} |"
            for c in r.changes
        ]
    else:
        out.append("No slice changes.")
    out += ["", "## Options (measured on the log)", ""]
    out += [f"- {g.says}" for g in r.gaps] + ([""] if r.gaps else [])
    out += _options_md(r)
    if r.objective_options:
        out += ["", "Fixes of the breached LLM objectives (the audit's ranking, its figures):", ""]
        out += [f"- {_objective_option(f)}" for f in r.objective_options]
    out += ["", "## Composed end-to-end percentiles", ""]
    out += ["| composition | before | after |", "|---|---|---|"]
    out += [
        f"| {_cell(c.method)} | {_slices(c.before)} | {_slices(c.after)} |" for c in r.compositions
    ]
    out += ["", "## Proposed budget", "", "```diff", r.diff.rstrip() or "(no change)", "```"]
    if r.class_proposals:
        out += ["", "## Classes", "", *(f"- {line}" for line in class_lines(r))]
    out += ["", "## Notes", ""] + [f"- {n}" for n in r.notes]
    return "\n".join(out) + "\n"


def class_lines(r: Rebudget) -> list[str]:
    """Per class: does it fit on its own requests, what it needs, which slices change."""
    out = []
    for name, n, c in r.class_proposals:
        need = ", ".join(f"{p} {_ms(v)}" for p, v in c.speedup_needed_ms.items() if v > 0)
        changed = ", ".join(ch.stage for ch in c.changes)
        out.append(
            f"class {name} ({n:,} requests): "
            + ("fits now" if c.fits_now else "does not fit now")
            + (f"; speed-up needed beyond reallocation: {need}" if need else "")
            + (f"; slices to change: {changed}" if changed else "")
        )
    return out


def _options_md(r: Rebudget) -> list[str]:
    if not r.options:
        return ["No option saves time on this log."]
    pcts = list(r.gated)
    head = "| option | stages | " + " | ".join(f"saves at {p} (budget / e2e)" for p in pcts)
    rows = [head + " | hours | risk | ms per hour | chosen |"]
    rows.append("|---|---|" + "---:|" * len(pcts) + "---:|---|---:|---|")
    for o in r.options:
        saved = " | ".join(
            f"{fmt.ms(o.saved_ms[p])} / {fmt.ms(o.composed_saved_ms[p])}" for p in pcts
        )
        rows.append(
            f"| {o.fix} | {_cell(', '.join(o.stages))} | {saved} | {fmt.number(o.hours)} | "
            f"{o.risk} | {fmt.number(o.score)} | {'yes' if o.chosen else ''} |"
        )
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rebudget_text(r: Rebudget) -> str:
    """The proposal as plain text for a terminal or a pipe."""
    out = [f"re-budget: {r.service} ({r.how})", _verdict(r), ""]
    for check in r.objectives:
        got = _ms(check.measured_ms) if check.measured_ms is not None else "not in the log"
        out.append(
            f"{check.objective}: target {_ms(check.target_ms)}, measured {got}: {check.verdict}"
        )
    if r.goodput is not None:
        out.append(_goodput_line(r.goodput))
    out.append("")
    for a in r.allocations:
        out.append(
            f"{a.percentile}: SLO {_ms(r.slo[a.percentile])}, stages may use {_ms(a.target_ms)}, "
            f"budget {_ms(a.old_ms)}, the stages' measured {a.percentile} add to "
            f"{_ms(a.measured_ms)}, "
            f"speed-up needed {_ms(a.speedup_needed_ms)}"
        )
    out.append("")
    for c in r.changes:
        out.append(f"  {c.stage}: {_slices(c.from_)} -> {_slices(c.to)}")
        out.append(f"      {c.reason}")
    out += [""] + [f"{g.says}" for g in r.gaps] if r.gaps else []
    if r.options:
        out += ["", "options (ms saved on the budget's figure / on composed e2e, per hour):"]
        for o in r.options:
            first = r.gated[0]
            mark = "*" if o.chosen else " "
            out.append(
                f" {mark} {o.fix} on {', '.join(o.stages)}: {fmt.ms(o.saved_ms[first])} / "
                f"{fmt.ms(o.composed_saved_ms[first])} ms at {first}, {fmt.number(o.hours)} h, "
                f"{o.risk} risk"
            )
    if r.objective_options:
        out += ["", "fixes of the breached LLM objectives (the audit's ranking, its figures):"]
        out += [f"   {_objective_option(f)}" for f in r.objective_options]
    out += ["", "composed end-to-end:"]
    for comp in r.compositions:
        out.append(f"  {comp.method}: before {_slices(comp.before)}; after {_slices(comp.after)}")
    out += ["", "proposed budget (diff):", r.diff.rstrip() or "(no change)", ""]
    if r.class_proposals:
        out += ["classes, each on its own requests and stages:"]
        out += [f"  {line}" for line in class_lines(r)] + [""]
    out += [f"note: {n}" for n in r.notes]
    # A section with nothing in it (no gated percentile, no change) leaves no gap.
    kept = [line for i, line in enumerate(out) if line or i == 0 or out[i - 1]]
    return "\n".join(kept) + "\n"


def _objective_option(f: RankedFix) -> str:
    # As the audit words it: `limit_decode_batch: tpot.p99 76 -> 39 ms; goodput ...`.
    said = f"{f.fix} on {f.stage}: {f.objective} {fmt.ms(f.objective_before_ms)} -> "
    said += f"{fmt.ms(f.objective_after_ms)} ms"
    if f.goodput_words():
        said += f"; {f.goodput_words()}"
    return f"{said}; {fmt.number(f.hours)} h, {f.risk} risk ({f.counterfactual})"


def _goodput_line(g: GoodputCheck) -> str:
    within = ", ".join(f"{k} {_ms(v)}" for k, v in g.thresholds.items())
    least = f" (minimum {fmt.share(g.min)})" if g.min is not None else ""
    return (
        f"goodput: {fmt.share(g.share)} of {fmt.count(g.requests)} requests meet {within}"
        f"{least}: {g.verdict}"
    )
