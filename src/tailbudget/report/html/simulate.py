"""`simulate` and `capacity` as self-contained HTML pages (timeline and curve charts)."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter

from tailbudget import _fmt as fmt
from tailbudget.report import sim_verdict
from tailbudget.report.html import page
from tailbudget.report.html.page import Cell, cell, esc, figure, kv, not_available, table
from tailbudget.report.html.sim_classes import capacity_classes_html, simulate_classes_html
from tailbudget.report.html.svg import INK, SERIES, new_figure, style, to_svg
from tailbudget.report.html.ticks import integer_axis
from tailbudget.report.simulate_md import LOG_ROW
from tailbudget.sim.capacity import CapacityReport
from tailbudget.sim.fit_table import bound_of
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.objectives import ObjectiveResult
from tailbudget.sim.run import RunResult, SimReport

__all__ = ["render_capacity_html", "render_simulate_html"]


def _ms_tick(v: float, _pos: object = None) -> str:
    return f"{v:,.0f}"


def timeline_chart(rep: SimReport) -> str | None:
    """Watched percentile per policy (top) and replicas alive (bottom) over time."""
    runs = [r for r in rep.runs if len(r.timeline) >= 2]
    if not runs:
        return None
    watched = runs[0].watched
    target = next(
        (o.objective.target_ms for o in runs[0].objectives if o.objective.key == watched), None
    )
    top, off = _scale(runs, target)
    with style("simulate"):
        fig = new_figure(7.6, 4.8)
        ax, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        for i, r in enumerate(runs):
            color = SERIES[i % len(SERIES)]
            t = np.array([p.t_offset_s for p in r.timeline]) / 60.0
            v = np.array([np.nan if p.value_ms is None else p.value_ms for p in r.timeline])
            label = r.policy
            if i in off:
                label += f" (off scale: up to {fmt.ms(off[i])} ms)"
            (ln,) = ax.plot(t, v, color=color, lw=1.4, label=label)
            ln.set_gid(f"tb-sim-{i}-value")
            if i in off and top is not None:
                # Where the policy leaves the chart: a marker on the top edge and its name.
                above = np.flatnonzero(v > top)
                x0 = float(t[above[0]])
                mk = ax.plot([x0], [top], marker="^", color=color, ms=7, clip_on=False)[0]
                mk.set_gid(f"tb-sim-{i}-offscale")
                ax.annotate(
                    f"{r.policy} off scale",
                    (x0, top),
                    xytext=(4, -11),
                    textcoords="offset points",
                    fontsize=7.5,
                    color=color,
                )
            (rl,) = ax2.step(t, [p.alive for p in r.timeline], where="post", color=color, lw=1.3)
            rl.set_gid(f"tb-sim-{i}-replicas")
        if target is not None:
            th = ax.axhline(target, color=INK, ls="--", lw=1, label=f"target {target:,.0f} ms")
            th.set_gid("tb-sim-target")
        ax.yaxis.set_major_formatter(FuncFormatter(_ms_tick))
        ax.set_ylabel(f"{watched}, last minute (ms)")
        ax.set_ylim(bottom=0, top=top)
        ax.set_title("Simulated service: each policy in the loop")
        ax2.set_ylabel("replicas (paid)")
        integer_axis(ax2.yaxis)
        ax2.set_ylim(bottom=0)
        ax2.set_xlabel("time (min)")
        fig.legend(
            *ax.get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=7.5
        )
        return to_svg(fig)


OFF_SCALE = 5.0
"""A policy whose worst figure is this many times the others' (and the target's) is drawn
off scale, so the policies that matter are not flattened against the axis."""


def _scale(runs: list[RunResult], target: float | None) -> tuple[float | None, dict[int, float]]:
    """The y-axis top (None: matplotlib's own) and the off-scale runs' peaks by index."""
    peaks = {}
    for i, r in enumerate(runs):
        vals = [p.value_ms for p in r.timeline if p.value_ms is not None and p.value_ms > 0]
        if vals:
            peaks[i] = max(vals)
    ref = max([target or 0.0, *sorted(peaks.values())[: max(1, (len(peaks) + 1) // 2)]])
    off = {i: v for i, v in peaks.items() if ref > 0 and v > OFF_SCALE * ref}
    kept = [v for i, v in peaks.items() if i not in off]
    if not off or not kept:
        return None, {}
    return 1.15 * max([*kept, target or 0.0]), off


def capacity_chart(rep: CapacityReport) -> str | None:
    """Replicas needed against load."""
    pts = [p for p in rep.curve if p.replicas is not None]
    if not pts:
        return None
    with style("capacity"):
        fig = new_figure(7.6, 3.4)
        ax = fig.add_subplot()
        (ln,) = ax.plot(
            [p.load for p in pts], [float(p.replicas or 0) for p in pts], "o-", color=SERIES[0]
        )
        ln.set_gid("tb-capacity-curve")
        ax.set_xlabel("load (x the log's)")
        ax.set_ylabel("replicas needed")
        integer_axis(ax.yaxis)
        ax.set_ylim(bottom=0)
        ax.set_title("Fewest replicas meeting every gated objective")
        return to_svg(fig)


def _runs_table(rep: SimReport) -> str:
    runs = rep.runs
    names = [o.objective.key for o in runs[0].objectives]
    head = ["policy", *names, "goodput", "minutes in breach", "replica-hours", "vs floor",
            "shed", "decisions"]  # fmt: skip
    rows = []
    for r in runs:
        breach = max((o.minutes_in_breach for o in r.objectives if o.objective.gated), default=0)
        ratio = sim_verdict.vs_floor(rep, r)
        rows.append(
            [cell(r.policy), *(_objective(o) for o in r.objectives),
             cell(r.goodput, "pct"), Cell(sim_verdict.minutes_cell(r), breach, "num"),
             cell(r.replica_hours, "num"),
             Cell(ratio, r.replica_hours_vs_floor if ratio != "n/a" else None, "num"),
             cell(r.shed, "int"), cell(len(r.decisions), "int")]
        )  # fmt: skip
    if rep.floor is not None:
        rows.append(
            [cell("floor (hindsight)"), *(cell(None) for _ in names), cell(None),
             cell(rep.floor.unmet_minutes, "int"), cell(rep.floor.replica_hours, "num"),
             Cell(sim_verdict.floor_ratio(rep), None if rep.floor.unmet_minutes else 1.0, "num"),
             cell(None),
             cell(None)]
        )  # fmt: skip
    if rep.log_measured:
        rows.append(
            [
                cell(LOG_ROW),
                *(
                    Cell(f"{fmt.ms(f.measured_ms)} ({f.verdict})", f.measured_ms, "num")
                    for f in rep.log_measured
                ),
            ]
            + [cell(None) for _ in head[len(names) + 1 :]]
        )
    return table(head, rows, numeric=list(range(1, len(head))))


def _objective(o: ObjectiveResult) -> Cell:
    """'1,234 ms (breach)': the figure with its verdict, as the markdown gives it."""
    return Cell(f"{fmt.ms(o.measured_ms)} ({o.verdict})", o.measured_ms, "num")


def _model(model: ServiceModel) -> str:
    rows = [
        [cell(p.name), cell(p.value, "num"), cell(p.unit), cell(p.source), cell(p.note, "long")]
        for p in model.params()
    ]
    head = kv(
        [("kind", model.kind), ("sources", ", ".join(model.sources)),
         ("requests", fmt.count(model.samples.size)),
         ("not identifiable (defaults)", ", ".join(model.unidentified) or "none")]
    )  # fmt: skip
    notes = "".join(f"<li>{esc(n)}</li>" for n in model.notes)
    return (
        head
        + table(["parameter", "value", "unit", "source", "note"], rows, numeric=[1])
        + (f"<ul>{notes}</ul>" if notes else "")
    )


def _fit(model: ServiceModel) -> str:
    """The fit table: every fitted run's figures on its own arrivals, predicted vs measured."""
    fit = model.fit
    assert fit is not None
    rows = [
        [cell(r.source.rsplit("/", 1)[-1]), cell(r.load), cell(r.figure),
         cell(r.measured_ms, "ms"), cell(r.predicted_ms, "ms"), cell(fmt.signed_share(r.error, 0)),
         cell("yes" if r.ok else f"no (bound {fmt.share(bound_of(r.figure), 0)})")]
        for r in fit.rows
    ]  # fmt: skip
    head = f"<p>{esc(sim_verdict.fit_summary(model))}</p>"
    if not rows:
        return head
    names = ["run", "load", "figure", "measured ms", "predicted ms", "error", "within"]
    return head + table(names, rows, numeric=[3, 4, 5])


def _threshold(metric: str, value: float | None) -> Cell:
    """A decision's value or threshold in its metric's unit (ms, a share, a ratio)."""
    if value is None:
        return cell(None)
    return Cell(fmt.threshold(metric, value), value, "num")


def _decisions(runs: list[RunResult]) -> str:
    rows = [
        [cell(r.policy), cell(d.t_s, "num"), cell(d.action), cell(d.metric),
         _threshold(d.metric, d.value), _threshold(d.metric, d.threshold),
         cell(d.reason, "long")]
        for r in runs
        for d in r.decisions
    ]  # fmt: skip
    if not rows:
        return not_available("no policy took an action")
    return table(
        ["policy", "t (s)", "action", "metric", "value", "threshold", "reason"],
        rows,
        numeric=[1, 4, 5],
    )


def _run_verdict(r: RunResult) -> str:
    gated = [o for o in r.objectives if o.objective.gated]
    parts = [
        f"{o.objective.key} {o.verdict}: {fmt.ms(o.measured_ms)} ms "
        f"({_side(o)} {fmt.ms(o.objective.target_ms)} ms, "
        f"{fmt.counted(o.minutes_in_breach, 'minute')} in breach"
        + (f", {fmt.count(o.minutes_inconclusive)} inconclusive)" if o.minutes_inconclusive
           else ")")
        for o in gated
    ]  # fmt: skip
    verdicts = {o.verdict for o in gated}
    head = (
        "breach"
        if "breach" in verdicts
        else "inconclusive"
        if "inconclusive" in verdicts
        else "meets every objective"
    )
    return (
        f"{r.policy}: {head}: {'; '.join(parts) or 'no gated objective'}; "
        f"{fmt.number(r.replica_hours)} replica-hours"
    )


def _side(o: ObjectiveResult) -> str:
    if o.measured_ms is None:
        return "no figure against"
    return "over" if o.measured_ms > o.objective.target_ms else "within"


def _verdict_block(headline: str, lines: list[str], bad: bool) -> str:
    items = "".join(f"<li>{esc(line)}</li>" for line in lines)
    cls = "bad" if bad else "ok"
    return f'<p class="verdict {cls}"><strong>{esc(headline)}</strong></p><ul>{items}</ul>'


def _floor_notes(rep: SimReport) -> str:
    """How minutes are counted, and why no ratio to an unmet floor is given."""
    said = [sim_verdict.MINUTES_RULE]
    if rep.floor is not None and rep.floor.note():
        note = rep.floor.note() or ""
        said.append(note[0].upper() + note[1:])
    said.append(sim_verdict.floor_unmet_note(rep))
    return "".join(f"<p>{esc(s)}.</p>" for s in said if s)


def render_simulate_html(rep: SimReport) -> str:
    """The simulation report: side by side, timeline, decisions, model."""
    take = sim_verdict.best_take(rep)
    notes = "".join(f"<li>{esc(n)}</li>" for n in rep.notes)
    headline, breached = sim_verdict.simulate_headline(rep)
    verdict = _verdict_block(headline, [_run_verdict(r) for r in rep.runs], breached)
    sections = [
        ("verdict", "Verdict", verdict),
        (
            "runs",
            "Policies side by side",
            _runs_table(rep) + _floor_notes(rep) + f"<ul>{notes}</ul>",
        ),
        (
            "timeline",
            "Timeline",
            figure("timeline", take, timeline_chart(rep), "simulation timeline"),
        ),
        *([("classes", "Classes", per_class)] if (per_class := simulate_classes_html(rep)) else []),
        ("decisions", "Decisions", _decisions(rep.runs)),
        *([("fit", "Fit: the model on its own runs", _fit(rep.model))] if rep.model.fit else []),
        ("model", "Model", _model(rep.model)),
    ]
    return page.document(
        "Closed-loop simulation",
        f"{rep.arrivals}: {fmt.count(rep.requests)} requests, seed {rep.seed}",
        sections,
    )


def render_capacity_html(rep: CapacityReport) -> str:
    """The capacity curve and where to scale before breach."""
    take = sim_verdict.capacity_take(rep)
    rows = [
        [cell(f"{p.load:g}x"),
         cell(p.replicas, "int") if p.replicas is not None else Cell("not met", None, "num"),
         cell(p.utilization, "pct"), *(_objective(o) for o in p.objectives)]
        for p in rep.curve
    ]  # fmt: skip
    names = [o.objective.key for o in rep.curve[0].objectives] if rep.curve else []
    needs = [
        f"at {p.load:g}x the log's load: "
        + (f"{p.replicas} replica{'s' if p.replicas != 1 else ''}" if p.replicas else "not met")
        for p in rep.curve
    ]
    headline, short = sim_verdict.capacity_headline(rep)
    notes = "".join(f"<li>{esc(n)}</li>" for n in rep.notes)  # the fitted-range flags too
    sections = [
        ("verdict", "Verdict", _verdict_block(headline, needs, short)),
        ("curve", "Replicas per load", figure("capacity", take, capacity_chart(rep), "capacity")
         + table(["load", "replicas", "utilization", *names], rows,
                 numeric=list(range(1, len(names) + 3)))
         + (f"<ul>{notes}</ul>" if notes else "")),
        *([("classes", "Classes", per_class)] if (per_class := capacity_classes_html(rep)) else []),
        *([("fit", "Fit: the model on its own runs", _fit(rep.model))] if rep.model.fit else []),
        ("model", "Model", _model(rep.model)),
    ]  # fmt: skip
    return page.document("Capacity", rep.arrivals, sections)
