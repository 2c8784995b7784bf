"""The Classes sections of the simulate and capacity pages: each class on its own
simulated requests, by its own objectives (attainment and minutes in breach per policy),
and per load which class sets the replica count (docs/classes.md)."""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget.report.html.page import Cell, cell, esc, table
from tailbudget.sim.capacity import CapacityReport
from tailbudget.sim.classes import ClassResult
from tailbudget.sim.run import SimReport

__all__ = ["capacity_classes_html", "simulate_classes_html"]

_HEAD = ["class", "objective", "target ms", "measured ms", "verdict", "attainment",
         "minutes in breach", "gated"]  # fmt: skip


def _name(c: ClassResult) -> str:
    return c.name if c.listed else f"{c.name} (not listed: service-wide)"


def _rows(lead: list[Cell], c: ClassResult) -> list[list[Cell]]:
    """One row per objective of the class; the leading cells on its first row only."""
    if not c.objectives:
        return [[*lead, cell(_name(c)), cell(c.requests, "int"), *(cell(None) for _ in _HEAD[1:])]]
    out = []
    for i, o in enumerate(c.objectives):
        first = i == 0
        out.append(
            [*(lead if first else [cell("") for _ in lead]),
             cell(_name(c) if first else ""), cell(c.requests, "int") if first else cell(""),
             cell(o.objective.key), cell(o.objective.target_ms, "ms"),
             cell(o.measured_ms, "ms"), cell(o.verdict), cell(o.attainment, "pct"),
             cell(o.minutes_in_breach, "int"), cell("yes" if o.objective.gated else "no")]
        )  # fmt: skip
    return out


def _breaches(classes: list[ClassResult]) -> list[str]:
    return [
        f"class {c.name} breaches {o.objective.key} ({fmt.ms(o.measured_ms)} ms over "
        f"{fmt.ms(o.objective.target_ms)} ms, {fmt.count(o.minutes_in_breach)} minutes in "
        "breach)"
        for c in classes
        for o in c.objectives
        if o.objective.gated and o.verdict == "breach"
    ]


def simulate_classes_html(rep: SimReport) -> str | None:
    """Per policy, each class's objectives on its own simulated requests (None: no classes)."""
    if not any(r.classes for r in rep.runs):
        return None
    rows = [row for r in rep.runs for c in r.classes or [] for row in _rows([cell(r.policy)], c)]
    head = ["policy", _HEAD[0], "requests", *_HEAD[1:]]
    body = (
        "<p>Each class on its own simulated requests (a drawn request keeps its logged "
        "class), by its own objectives; attainment is the share of 1-minute windows meeting "
        "the objective.</p>"
    )
    body += table(head, rows, numeric=[2, 4, 5, 7, 8])
    said = [f"{r.policy}: {b}" for r in rep.runs for b in _breaches(r.classes or [])]
    notes = sorted({f"class {c.name}: {c.record().note}" for r in rep.runs
                    for c in r.classes or [] if c.skipped})  # fmt: skip
    items = "".join(f"<li>{esc(s)}</li>" for s in [*said, *notes])
    return body + (f"<ul>{items}</ul>" if items else "") + _shedding(rep)


def _shedding(rep: SimReport) -> str:
    """Per policy, which class each shed_load sheds and each stop_shedding restores."""
    out = ""
    for r in rep.runs:
        steps = [
            [cell(f"+{fmt.count(s.t_offset_s)}s"), cell(s.action),
             cell(s.sheds or "nothing left to shed"), cell(s.trigger), cell(s.rule or "-")]
            for s in r.shedding or []
        ]  # fmt: skip
        if steps:
            out += f"<h3>Shedding by {esc(r.policy)}, the highest priority number first</h3>"
            out += table(["t", "action", "class shed or restored", "trigger", "rule"], steps)
    return out


def capacity_classes_html(rep: CapacityReport) -> str | None:
    """Per load, each class with the count found and the class that sets it."""
    if not any(p.classes for p in rep.curve):
        return None
    rows: list[list[Cell]] = []
    said = []
    for p in rep.curve:
        n = "not met" if p.replicas is None else fmt.count(p.replicas)
        lead = [cell(f"{p.load:g}x"), cell(n)]
        rows += [row for c in p.classes or [] for row in _rows(lead, c)]
        if p.set_by is not None:
            who = "the service-wide objectives" if p.set_by == "service" else f"class {p.set_by}"
            what = "is furthest over target" if p.replicas is None else "sets the count"
            count = "" if p.replicas is None else f", {n} replicas"
            said.append(f"{p.load:g}x: {who} {what}{count}")
    head = ["load", "replicas", _HEAD[0], "requests", *_HEAD[1:]]
    items = "".join(f"<li>{esc(s)}</li>" for s in said)
    return (f"<ul>{items}</ul>" if items else "") + table(head, rows, numeric=[3, 5, 6, 8, 9])
