"""The Classes sections of the plan, rebudget and replay pages: the figures and sentences
of their text and Markdown class lines (report/plan.py, report/rebudget.py,
report/replay_text.py), laid out as tables (docs/classes.md)."""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget.budget.plan import Plan
from tailbudget.budgeting.proposal import Rebudget
from tailbudget.control.replay_record import ReplayReport
from tailbudget.report.html.page import Cell, cell, esc, table

__all__ = ["plan_classes_html", "rebudget_classes_html", "replay_classes_html"]


def _items(lines: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{esc(s)}</li>" for s in lines) + "</ul>" if lines else ""


def plan_classes_html(p: Plan) -> str | None:
    """Each class's objectives against the composed figures of the stages it goes through."""
    if not p.classes:
        return None
    rows: list[list[Cell]] = []
    for c in p.classes:
        lead = [cell(c.name), cell(c.priority, "int"), cell(", ".join(c.skip) or "-"),
                cell("fits" if c.fits else "does not fit")]  # fmt: skip
        for i, o in enumerate(c.objectives or [None]):
            first = i == 0
            row = lead if first else [cell("") for _ in lead]
            if o is None:
                rows.append([*row, cell("no objective"), cell(None), cell(None), cell(None)])
                continue
            verdict = {True: "fits", False: "does not fit", None: "not checked"}[o.fits]
            rows.append(
                [*row, cell(f"{o.metric} {o.percentile}"), cell(o.target_ms, "ms"),
                 cell(o.composed_ms, "ms"), cell(verdict)]
            )  # fmt: skip
    head = ["class", "priority", "skips", "class verdict", "objective", "target ms",
            "composed ms", "verdict"]  # fmt: skip
    problems = [f"class {c.name}: {m}" for c in p.classes for m in c.problems]
    return table(head, rows, numeric=[1, 5, 6]) + _items(problems)


def rebudget_classes_html(r: Rebudget) -> str | None:
    """Per class, on its own requests and stages: does it fit, what it needs, which slices."""
    if not r.class_proposals:
        return None
    rows = []
    for name, n, c in r.class_proposals:
        need = ", ".join(f"{p} {fmt.ms(v)} ms" for p, v in c.speedup_needed_ms.items() if v > 0)
        rows.append(
            [cell(name), cell(n, "int"), cell("fits now" if c.fits_now else "does not fit now"),
             cell(need or "-"), cell(", ".join(ch.stage for ch in c.changes) or "-")]
        )  # fmt: skip
    head = ["class", "requests", "now", "speed-up needed beyond reallocation", "slices to change"]
    return table(head, rows, numeric=[1])


def replay_classes_html(rep: ReplayReport) -> str | None:
    """Each class's own decisions on its own requests, and which class each shed_load sheds."""
    if rep.classes is None:
        return None
    rows = [
        [cell(c.name), cell(c.priority, "int"), cell(c.requests, "int"),
         cell(", ".join(f"{k} x{fmt.count(v)}" for k, v in c.summary.items()) or "no action"),
         cell("; ".join(c.rules) or "-", "long")]
        for c in rep.classes
    ]  # fmt: skip
    body = f"<p>Column {esc(rep.class_by)}: each class on its own requests with its own rules.</p>"
    body += table(["class", "priority", "requests", "decisions", "rules"], rows, numeric=[1, 2])
    steps = [
        [cell(f"+{fmt.count(s.t_offset_s)}s"), cell(s.action),
         cell(s.sheds or "nothing left to shed"), cell(s.trigger), cell(s.rule)]
        for s in rep.shedding or []
    ]  # fmt: skip
    if steps:
        body += "<h3>Shedding, lowest priority first</h3>"
        body += table(["t", "action", "class shed or restored", "trigger", "rule"], steps)
    return body
