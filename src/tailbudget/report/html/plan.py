"""`plan` and `rebudget` as self-contained HTML pages: the verdict first, then tables.

The figures and sentences are the Markdown report's (report/plan.py, report/rebudget.py):
one truth, laid out as the audit and simulate pages are (sortable tables, no assets).
"""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget._units import PERCENTILES
from tailbudget.budget.plan import Plan
from tailbudget.budgeting.proposal import Rebudget
from tailbudget.report import plan as plan_md
from tailbudget.report import rebudget as rebudget_md
from tailbudget.report.html import page
from tailbudget.report.html.class_sections import plan_classes_html, rebudget_classes_html
from tailbudget.report.html.page import Cell, cell, esc, kv, table

__all__ = ["render_plan_html", "render_rebudget_html"]


def _verdict(headline: str, lines: list[str], bad: bool) -> str:
    items = "".join(f"<li>{esc(line)}</li>" for line in lines if line)
    cls = "bad" if bad else "ok"
    return f'<p class="verdict {cls}"><strong>{esc(headline)}</strong></p><ul>{items}</ul>'


def _list(items: list[str], empty: str) -> str:
    return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>" if items else empty


def _plan_verdict(p: Plan) -> str:
    headline = (
        "The budget is not checked: no gated objective can be estimated from its slices"
        if p.not_checked
        else f"The budget {p.verdict_words()}"
    )
    lines = [plan_md.check_line(p, c) for c in p.gates.checks]
    lines += [
        f"{plan_md.PROBLEM_LABELS.get(pr.severity, pr.severity)}: {pr.message}" for pr in p.problems
    ]
    return _verdict(headline, lines, p.fits is False)


def _plan_stages(p: Plan) -> str:
    key = plan_md._key(p)
    rows: list[list[Cell]] = []
    for s in p.stages:
        name = ("∥ " if s.in_parallel else "") + ("↳ " if s.inside else "") + s.name
        name += " (llm)" if s.source == "llm" else ""
        rows.append(
            [
                cell(name),
                *(cell(s.budget.get(q), "ms") for q in PERCENTILES),
                cell(s.share_of_slo.get(key), "pct"),
            ]
        )
    comp = p.composed
    add_label, comp_label, note_text = plan_md.row_labels(p)
    rows.append([cell(add_label), *(cell(p.additive[q], "ms") for q in PERCENTILES)])
    rows[-1].append(cell(None))
    rows.append([cell(comp_label)] + [cell(comp.at(q), "ms") for q in PERCENTILES] + [cell(None)])
    rows.append([cell("SLO"), *(cell(p.slo.get(q), "ms") for q in PERCENTILES), cell(None)])
    heads = ["stage", *(f"{q} ms" for q in PERCENTILES), plan_md.share_head(p, key)]
    note = f"<p>{esc(note_text)}</p>"
    return table(heads, rows, numeric=(1, 2, 3, 4)) + note


def _plan_objectives(p: Plan) -> str:
    if not p.objectives:
        return page.not_available("the budget states no objective beyond the slices")
    # The Markdown's cells, the figures right-aligned as every other table's.
    rows = [
        [Cell(c, css="num" if 0 < i < 5 else "") for i, c in enumerate(plan_md._objective_cells(o))]
        for o in p.objectives
    ]
    body = table(plan_md._OBJECTIVE_HEAD, rows, numeric=(1, 2, 3, 4))
    if p.goodput is not None:
        body += f"<p>{esc(plan_md._goodput_line(p))}</p>"
    return body


def _plan_llm(p: Plan) -> str:
    lines = [
        f"{r.stage}: {plan_md._ttft(r, ' ms')}decode {fmt.ms(r.decode_ms)} ms "
        f"({fmt.count(r.output_tokens)} tokens at {fmt.number(r.tokens_per_s)} tok/s) + tail "
        f"{fmt.ms(r.tail_ms)} ms = {fmt.ms(r.total_ms)} ms{plan_md._held(r)}; "
        f"{r.dominant} dominates"
        for r in p.llm
    ]
    return _list(lines, page.not_available("no LLM stage in this budget"))


def render_plan_html(p: Plan) -> str:
    """The plan: its verdict, the slices against the SLO, objectives, LLM stages."""
    sections = [
        ("verdict", "Verdict", _plan_verdict(p)),
        ("slices", "Slices against the SLO", _plan_stages(p)),
        ("objectives", "Objectives", _plan_objectives(p)),
    ]
    per_class = plan_classes_html(p)
    if per_class is not None:
        sections.append(("classes", "Classes", per_class))
    if p.llm:
        sections.append(("llm", "LLM stages", _plan_llm(p)))
    sections.append(
        (
            "setup",
            "Set-up",
            kv(
                [
                    ("environment", plan_md._environment(p)),
                    ("headroom", fmt.share(p.headroom, 0)),
                    ("overhead", f"{fmt.ms(p.overhead_ms)} ms"),
                    ("composition", f"{p.composed.method}, {fmt.count(p.composed.samples)}"),
                ]
            ),
        )
    )
    return page.document(f"Budget plan: {p.service}", plan_md._environment(p), sections)


def _rebudget_objectives(r: Rebudget) -> str:
    rows = [
        [cell(o.objective), cell(o.target_ms, "ms"), cell(o.measured_ms, "ms"), cell(o.verdict)]
        for o in r.objectives
    ]
    body = table(["objective", "target ms", "measured ms", "verdict"], rows, numeric=(1, 2))
    if r.goodput is not None:
        body += f"<p>{esc(rebudget_md._goodput_line(r.goodput))}</p>"
    return body


def _rebudget_slices(r: Rebudget) -> str:
    rows = [
        [
            cell(a.percentile),
            cell(r.slo[a.percentile], "ms"),
            cell(a.target_ms, "ms"),
            cell(a.old_ms, "ms"),
            cell(a.measured_ms, "ms"),
            cell(a.speedup_needed_ms, "ms"),
        ]
        for a in r.allocations
    ]
    heads = ["percentile", "SLO", "stages may use", "budget", "measured", "speed-up needed"]
    return table(heads, rows, numeric=(1, 2, 3, 4, 5))


def _rebudget_changes(r: Rebudget) -> str:
    if not r.changes:
        return "<p>No slice changes.</p>"
    rows = [
        [
            cell(c.stage),
            cell(rebudget_md._slices(c.from_)),
            cell(rebudget_md._slices(c.to)),
            cell(c.reason, "long"),
        ]
        for c in r.changes
    ]
    return table(["stage", "from", "to", "reason"], rows)


def _rebudget_options(r: Rebudget) -> str:
    # Where each e2e gap lies, the options' table, then the audit's fixes of breached
    # LLM objectives: the Markdown's order and words.
    gaps = _list([g.says for g in r.gaps], "")
    fixes = ""
    if r.objective_options:
        fixes = "<p>Fixes of the breached LLM objectives (the audit's ranking, its figures):</p>"
        fixes += _list([rebudget_md._objective_option(f) for f in r.objective_options], "")
    return gaps + _options_table(r) + fixes


def _options_table(r: Rebudget) -> str:
    if not r.options:
        return "<p>No option saves time on this log.</p>"
    pcts = list(r.gated)
    rows = [
        [cell(o.fix), cell(", ".join(o.stages))]
        + [cell(f"{fmt.ms(o.saved_ms[q])} / {fmt.ms(o.composed_saved_ms[q])}") for q in pcts]
        + [cell(o.hours, "num"), cell(o.risk), cell(o.score, "num")]
        + [cell("yes" if o.chosen else "")]
        for o in r.options
    ]
    heads = ["option", "stages", *(f"saves at {q} (budget / e2e)" for q in pcts)]
    heads += ["hours", "risk", "ms per hour", "chosen"]
    return table(heads, rows, numeric=(len(pcts) + 2, len(pcts) + 4))


def _rebudget_budget(r: Rebudget) -> str:
    compositions = table(
        ["composition", "before", "after"],
        [
            [
                cell(c.method, "long"),
                cell(rebudget_md._slices(c.before)),
                cell(rebudget_md._slices(c.after)),
            ]
            for c in r.compositions
        ],
    )
    diff = r.diff.rstrip() or "(no change)"
    return f"{compositions}<h3>Proposed budget (diff)</h3><pre>{esc(diff)}</pre>"


def render_rebudget_html(r: Rebudget) -> str:
    """The proposal: its verdict, objectives on the log, slices, changes, options, budget."""
    bad = not r.slices_fit and not r.closes_gap and any(v > 0 for v in r.speedup_needed_ms.values())
    verdict = _verdict(rebudget_md._budget_verdict(r), [rebudget_md._e2e_line(r)], bad)
    sections = [
        ("verdict", "Verdict", verdict),
        ("objectives", "Objectives on the log", _rebudget_objectives(r)),
        ("slices", "Slices against the log", _rebudget_slices(r)),
        ("changes", "Changes", _rebudget_changes(r)),
        ("options", "Options (measured on the log)", _rebudget_options(r)),
        ("budget", "Composed end to end, and the proposed budget", _rebudget_budget(r)),
    ]
    per_class = rebudget_classes_html(r)
    if per_class is not None:
        sections.append(("classes", "Classes", per_class))
    sections.append(("notes", "Notes", _list(list(r.notes), "<p>None.</p>")))
    return page.document(f"Re-budget: {r.service}", r.source, sections)
