"""The audit page's objectives section: the table every reader starts from, goodput, and
the cause and fix found for each breached objective."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.ticker import NullLocator

from tailbudget import _fmt as fmt
from tailbudget.audit.report import AuditReport, CdfPoint, ObjectiveRow
from tailbudget.budget.objectives import parse_percentile
from tailbudget.report.html.page import cell, esc, figure, not_available, table
from tailbudget.report.html.svg import BLUE, INK, new_figure, style, to_svg
from tailbudget.report.objectives_md import definitions

__all__ = ["objectives_html"]


def _name(o: ObjectiveRow) -> str:
    name = f"{o.metric} {o.percentile}"
    return name + (f" at {fmt.count(o.output_tokens)} tokens" if o.output_tokens else "")


def _goodput(r: AuditReport) -> str:
    g = r.goodput
    if not g.thresholds:
        return ""
    within = ", ".join(f"{esc(m)} &le; {fmt.ms(v)} ms" for m, v in g.thresholds.items())
    minimum = f" (minimum {fmt.share(g.min, 1)}: {esc(g.verdict)})" if g.min is not None else ""
    return (
        f"<p>Goodput {fmt.share(g.share, 1)}{minimum}: requests that are not errors "
        f"and meet {within}.</p>"
    )


def _causes(r: AuditReport) -> str:
    items = [
        f"<li><strong>{esc(f'{o.metric}.{o.percentile}')}</strong>: {esc(o.driver)}</li>"
        for o in r.objectives
        if o.driver
    ]
    items += [
        f"<li><strong>{esc(h.objective)}</strong>: {esc(h.evidence)}</li>"
        for h in r.hypotheses
        if h.objective
    ]
    items += [
        f"<li>{esc(f'{o.metric} {o.percentile}: {o.note}')}</li>" for o in r.objectives if o.note
    ]
    return "<ul>" + "".join(items) + "</ul>" if items else ""


def _charts(r: AuditReport) -> str:
    body = ""
    for metric in ("ttft", "tpot"):
        points = r.distributions.get(metric)
        mine = [o for o in r.objectives if o.metric == metric]
        if points and mine:
            breached = [o.percentile for o in mine if o.verdict == "breach"]
            takeaway = (
                f"{metric.upper()} breaches {', '.join(breached)}"
                if breached
                else f"{metric.upper()} meets every {metric} objective"
            )
            body += figure(
                f"{metric}-cdf", takeaway, quantile_chart(metric, points, mine), f"{metric} CDF"
            )
    return body


def objectives_html(r: AuditReport) -> str:
    """The objectives table, goodput line and breached-objective drivers."""
    if not r.objectives:
        return not_available("no objectives were given")
    body = table(
        ["objective", "target ms", "measured ms", "verdict", "gated", "from"],
        [
            [
                cell(_name(o)),
                cell(o.target_ms, "ms"),
                cell(o.measured_ms, "ms"),
                cell(o.verdict),
                cell("yes" if o.gated else "no"),
                cell(o.n, "int"),
            ]
            for o in r.objectives
        ],
        numeric=[1, 2, 5],
    )
    said = f"<p>Measured as: {esc(definitions(r.objectives))}.</p>"
    return body + said + _goodput(r) + _causes(r) + _charts(r)


def quantile_chart(
    metric: str, points: Sequence[CdfPoint], objs: Sequence[ObjectiveRow]
) -> str | None:
    """The metric's CDF (log-x, logit-y) with each objective's target and measured point."""
    pts = sorted((p.ms, p.q) for p in points if p.ms > 0 and 0 < p.q < 1)
    if len(pts) < 2:
        return None

    with style("cdf"):
        fig = new_figure()
        ax = fig.add_subplot()
        (line,) = ax.plot(
            [p[0] for p in pts], [p[1] for p in pts], color=BLUE, lw=2, label=f"{metric} (CDF)"
        )
        line.set_gid(f"tb-{metric}-cdf-curve")
        ax.set_xscale("log")
        ax.set_yscale("logit")
        ax.set_ylim(max(0.01, pts[0][1]), max(0.999, pts[-1][1]))
        for i, o in enumerate(objs):
            q = parse_percentile(o.percentile)[1]
            ln = ax.axvline(
                o.target_ms,
                color=INK,
                ls="--",
                lw=1.1,
                label=f"{o.percentile} target {fmt.ms(o.target_ms)} ms",
            )
            ln.set_gid(f"tb-{metric}-cdf-target-{i}")
            if o.measured_ms is not None:
                ax.scatter([o.measured_ms], [q], color=INK, zorder=5, s=22)
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(f"{metric} (ms, log scale)")
        ax.set_ylabel("percentile (logit scale)")
        ax.set_title(f"{metric.upper()} distribution vs its objectives")
        ax.legend(loc="lower right")
        return to_svg(fig)
