"""Markdown for `simulate` (policies side by side) and `capacity` (the replica curve)."""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget._names import safe_markdown_renderer
from tailbudget.control.class_shedding import SERVICE, ClassDecision
from tailbudget.control.decision import Decision
from tailbudget.report import sim_verdict
from tailbudget.sim.capacity import CapacityReport
from tailbudget.sim.fit_table import bound_of
from tailbudget.sim.floor import METHOD
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.run import SimReport

__all__ = ["capacity_markdown", "fit_markdown", "model_markdown", "simulate_markdown"]


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def model_markdown(model: ServiceModel) -> list[str]:
    """The model section: every parameter, where it came from, and the fit quality."""
    lines = [
        "## Model",
        "",
        f"{model.kind} model from {', '.join(model.sources)} "
        f"({fmt.count(model.samples.size)} requests)",
        "",
    ]
    lines += _table(
        ["parameter", "value", "unit", "source", "note"],
        [[p.name, fmt.number(p.value), p.unit, p.source, p.note or "-"] for p in model.params()],
    )
    if model.unidentified:
        lines += [
            "",
            f"Not identifiable from the logs (stated defaults): {', '.join(model.unidentified)}.",
        ]
    if model.fit_quality:
        quality = [f"{_QUALITY.get(k, k)}: {fmt.listing(v)}" for k, v in model.fit_quality.items()]
        lines += ["", "Fit quality: " + "; ".join(quality)]
    lines += [f"- {n}" for n in model.notes]
    return lines


def fit_markdown(model: ServiceModel) -> list[str]:
    """The fit table: every fitted run's figures on its own arrivals, predicted vs measured."""
    fit = model.fit
    if fit is None:
        return []
    lines = ["## Fit: the model on its own runs", "", sim_verdict.fit_summary(model)]
    if not fit.rows:
        return lines
    lines.append("")
    return lines + _table(
        ["run", "load", "figure", "measured ms", "predicted ms", "error", "within"],
        [
            [r.source.rsplit("/", 1)[-1], r.load, r.figure, fmt.ms(r.measured_ms),
             fmt.ms(r.predicted_ms), fmt.signed_share(r.error, 0),
             "yes" if r.ok else f"**no** (bound {fmt.share(bound_of(r.figure), 0)})"]
            for r in fit.rows
        ],
    )  # fmt: skip


_QUALITY = {
    "points": "load levels (sequences decoding, TPOT ms)",
    "tpot_residual_ms": "TPOT residuals (ms)",
    "tpot_r2": "TPOT R²",
    "ttft_vs_prompt_r2": "TTFT vs prompt R²",
    "tpot_line": "TPOT line",
    "misfit": "misfit over every run's figures",
    "replays": "replays tried",
    "work": "work",
}
"""How the fit's quality figures read (their JSON keys stay as they are)."""


LOG_ROW = "the log as recorded (audit)"
"""The policies table's row of each objective measured on the log itself."""


@safe_markdown_renderer
def simulate_markdown(rep: SimReport) -> str:
    """Policies side by side, the objectives per policy, decisions, the model."""
    lines = [
        "# Closed-loop simulation",
        "",
        f"**Verdict: {sim_verdict.simulate_headline(rep)[0]}.**",
        "",
        f"Arrivals: {rep.arrivals}: {fmt.count(rep.requests)} requests, "
        f"{fmt.seconds(rep.duration_s)} simulated, seed {rep.seed}.",
        "",
        "## Policies side by side",
        "",
    ]
    names = [o.objective.key for o in rep.runs[0].objectives]
    head = [
        "policy",
        *names,
        "goodput",
        "minutes in breach",
        "replica-hours",
        "vs floor",
        "peak",
        "shed",
        "decisions",
    ]
    rows = []
    for r in rep.runs:
        objs = [f"{fmt.ms(o.measured_ms)} ({o.verdict})" for o in r.objectives]
        rows.append(
            [r.policy, *objs, fmt.share(r.goodput), sim_verdict.minutes_cell(r),
             fmt.number(r.replica_hours), sim_verdict.vs_floor(rep, r),
             fmt.count(r.peak_replicas), fmt.count(r.shed), fmt.count(len(r.decisions))]
        )  # fmt: skip
    if rep.floor is not None:
        rows.append(
            ["floor (hindsight)", *("" for _ in names), "", fmt.count(rep.floor.unmet_minutes),
             fmt.number(rep.floor.replica_hours), sim_verdict.floor_ratio(rep),
             fmt.count(rep.floor.peak), "", ""]
        )  # fmt: skip
    if rep.log_measured:
        # The audit's figures on the log itself, beside the prediction: the same objective
        # has two figures here, and the row says which is which.
        recorded = [f"{fmt.ms(f.measured_ms)} ({f.verdict})" for f in rep.log_measured]
        rows.append([LOG_ROW, *recorded, *("" for _ in head[len(names) + 1 :])])
    lines += _table(head, rows)
    if rep.floor is not None:
        lines += ["", f"Floor: {METHOD}."]
        said = rep.floor.note()
        lines += [f"{said[0].upper()}{said[1:]}."] if said else []
        unmet = sim_verdict.floor_unmet_note(rep)
        lines += [f"{unmet}."] if unmet else []
    lines += _classes(rep)
    thin = {f"{o.objective.key}: {o.note}" for r in rep.runs for o in r.objectives if o.note}
    lines += ["", *(f"- {n}" for n in sorted(thin))] if thin else []
    lines += ["", f"{sim_verdict.MINUTES_RULE}.", ""]
    lines += ["Attainment: share of 1-minute windows not in breach of each objective.", ""]
    lines += _table(
        ["policy", *names],
        [[r.policy, *(fmt.share(o.attainment) for o in r.objectives)] for r in rep.runs],
    )
    for r in rep.runs:
        if r.decisions:
            lines += ["", f"## Decisions: {r.policy}", ""]
            lines += _table(
                ["t (s)", "action", "metric", "value", "threshold", "replicas"],
                [
                    [fmt.count(d.t_s), d.action, _whose(d), fmt.threshold(d.metric, d.value),
                     fmt.threshold(d.metric, d.threshold), fmt.count(d.replicas)]
                    for d in r.decisions[:200]
                ],
            )  # fmt: skip
    lines += ["", *fit_markdown(rep.model), ""] if rep.model.fit is not None else []
    lines += ["", *model_markdown(rep.model), ""]
    lines += [f"- {n}" for n in rep.notes]
    return "\n".join(lines) + "\n"


def _whose(d: Decision) -> str:
    """The decision's metric, with the class whose own rule read it ('premium p95')."""
    if isinstance(d, ClassDecision) and d.trigger != SERVICE:
        return f"{d.trigger} {d.metric}"
    return d.metric


def _classes(rep: SimReport) -> list[str]:
    """Each class on its own simulated requests, per policy (only with classes)."""
    rows = [
        [c.name if c.listed else f"{c.name} (not listed: service-wide, ungated)", r.policy,
         fmt.count(c.requests),
         "; ".join(f"{o.objective.key} {fmt.ms(o.measured_ms)} ({o.verdict})"
                   for o in c.objectives) or "-",
         fmt.count(max((o.minutes_in_breach for o in c.objectives if o.objective.gated),
                       default=0))]
        for r in rep.runs for c in r.classes or []
    ]  # fmt: skip
    if not rows:
        return []
    lines = ["", "## Classes", "", "Each class on its own simulated requests (a drawn request "
             "keeps its logged class), by its own objectives.", ""]  # fmt: skip
    lines += _table(["class", "policy", "requests", "objectives", "minutes in breach"], rows)
    skipped = {f"class {c.name}: {c.record().note}" for r in rep.runs for c in r.classes or []
               if c.skipped}  # fmt: skip
    return lines + [f"- {n}" for n in sorted(skipped)] + _shedding(rep)


def _shedding(rep: SimReport) -> list[str]:
    """Per policy, which class each shed_load sheds and each stop_shedding restores."""
    out = []
    for r in rep.runs:
        steps = r.shedding or []
        if not steps:
            continue
        out += ["", f"Shedding by {r.policy}, the highest priority number first:", ""]
        out += _table(
            ["t (s)", "action", "class shed or restored", "trigger", "rule"],
            [[fmt.count(s.t_offset_s), s.action, s.sheds or "nothing left to shed", s.trigger,
              s.rule or "-"] for s in steps],
        )  # fmt: skip
    return out


def _set_by(rep: CapacityReport) -> list[str]:
    """Per load, which class sets the count (only with classes)."""
    out = []
    for p in rep.curve:
        if p.classes is None or p.set_by is None:
            continue
        who = "the service-wide objectives" if p.set_by == "service" else f"class {p.set_by}"
        figures = "; ".join(
            f"{c.name} {o.objective.key} {fmt.ms(o.measured_ms)} ({o.verdict})"
            for c in p.classes
            for o in c.objectives
            if c.listed
        )
        if p.replicas is None:
            out.append(f"- {p.load:g}x: not met; {who} is furthest over target ({figures})")
        else:
            n = fmt.count(p.replicas)
            out.append(f"- {p.load:g}x: {who} sets the count, {n} replicas ({figures})")
    return ["", "Every class met with the fewest replicas:", "", *out] if out else []


@safe_markdown_renderer
def capacity_markdown(rep: CapacityReport) -> str:
    """The replica curve and where to scale before breach."""
    verdict = f"**Verdict: {sim_verdict.capacity_headline(rep)[0]}.**"
    lines = ["# Capacity", "", verdict, "", f"Arrivals: {rep.arrivals}.", ""]
    names = [o.objective.key for o in rep.curve[0].objectives] if rep.curve else []
    lines += _table(
        ["load", "replicas", "utilization", *names],
        [
            [f"{p.load:g}x", "not met" if p.replicas is None else fmt.count(p.replicas),
             fmt.share(p.utilization, 0),
             *(f"{fmt.ms(o.measured_ms)} ({o.verdict})" for o in p.objectives)]
            for p in rep.curve
        ],
    )  # fmt: skip
    lines += _set_by(rep)
    sbb = rep.scale_before_breach
    lines.append("")
    if sbb is None:
        lines.append("Scale before breach: no load at which the objectives were met to start from.")
    elif sbb.load is None:
        lines.append(f"Scale before breach: {sbb.note}.")
    else:
        lines.append(
            f"Scale before breach: on {fmt.count(sbb.replicas)} "
            f"{'replica' if sbb.replicas == 1 else 'replicas'}, {sbb.objective} reaches "
            f"{fmt.share(sbb.share_of_target, 0)} of its target at {sbb.load:g}x the log's load."
        )
    lines += ["", *fit_markdown(rep.model), ""] if rep.model.fit is not None else []
    lines += ["", *model_markdown(rep.model), ""]
    lines += [f"- {n}" for n in rep.notes]
    return "\n".join(lines) + "\n"
