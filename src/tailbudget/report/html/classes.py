"""The audit page's classes section: each class's objectives on its own requests, and
every class's latency CDF on one chart, each with its own targets."""

from __future__ import annotations

from matplotlib.ticker import NullLocator

from tailbudget import _fmt as fmt
from tailbudget.audit.report import AuditReport, ClassRow
from tailbudget.budget.objectives import parse_percentile
from tailbudget.report.html.page import Cell, cell, esc, figure, not_available, table
from tailbudget.report.html.svg import INK, SERIES, new_figure, style, to_svg

__all__ = ["classes_chart", "classes_html"]

SHOWN = 8
"""Classes drawn on the chart (listed ones first); the table has every one."""


def _rows(r: AuditReport) -> list[list[Cell]]:
    out: list[list[Cell]] = []
    for c in r.classes or []:
        name = c.name if c.listed else f"{c.name} (not listed: service-wide)"
        driver = "-" if c.driver is None else f"{c.driver} (+{fmt.ms(c.driver_delta_ms)} ms)"
        for i, o in enumerate(c.objectives):
            first = i == 0
            out.append(
                [
                    cell(name if first else ""),
                    cell(c.requests, "int") if first else cell(""),
                    cell(fmt.share(c.share) if first else ""),
                    cell(f"{o.metric} {o.percentile}"),
                    cell(o.target_ms, "ms"),
                    cell(o.measured_ms, "ms"),
                    cell(o.verdict),
                    cell("yes" if o.gated else "no"),
                    cell(driver if first else ""),
                ]
            )
    return out


def classes_html(r: AuditReport) -> str:
    """The class table, the drivers of breached class objectives and the CDF chart."""
    if not r.classes:
        return not_available(f"no request carries a class in column {r.class_by!r}")
    body = table(
        ["class", "requests", "share", "objective", "target ms", "measured ms", "verdict",
         "gated", "driver"],
        _rows(r),
        numeric=[1, 2, 4, 5],
    )  # fmt: skip
    said = [
        f"<li><strong>{esc(c.name)} {esc(o.metric)}.{esc(o.percentile)}</strong>: "
        f"{esc(o.driver)}</li>"
        for c in r.classes
        for o in c.objectives
        if o.driver
    ]
    body += "<ul>" + "".join(said) + "</ul>" if said else ""
    breached = [c.name for c, _ in r.class_breaches()]
    takeaway = (
        f"class {', '.join(dict.fromkeys(breached))} misses its own objective"
        if breached
        else "every class meets its own objectives"
    )
    return body + figure("class-cdf", takeaway, classes_chart(r.classes), "latency CDF per class")


def classes_chart(classes: list[ClassRow]) -> str | None:
    """Each class's end-to-end CDF (log-x, logit-y), its e2e targets as marks on its curve."""
    drawn = [c for c in sorted(classes, key=lambda c: not c.listed) if len(c.cdf) > 1][:SHOWN]
    if not drawn:
        return None
    with style("cdf"):
        fig = new_figure()
        ax = fig.add_subplot()
        lo = 0.5
        for i, c in enumerate(drawn):
            pts = sorted((p.ms, p.q) for p in c.cdf if p.ms > 0 and 0 < p.q < 1)
            color = SERIES[i % len(SERIES)]
            (line,) = ax.plot(
                [p[0] for p in pts], [p[1] for p in pts], color=color, lw=1.8,
                label=f"{c.name} ({fmt.count(c.requests)})",
            )  # fmt: skip
            line.set_gid(f"tb-class-cdf-{i}")
            lo = min(lo, pts[0][1]) if pts else lo
            for o in c.objectives:
                if o.metric != "e2e":
                    continue
                q = parse_percentile(o.percentile)[1]
                mark = "x" if o.verdict == "breach" else "|"
                ax.scatter([o.target_ms], [q], color=color, marker=mark, s=60, zorder=5)
        ax.set_xscale("log")
        ax.set_yscale("logit")
        ax.set_ylim(max(0.01, lo), 0.999)
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("end-to-end latency (ms, log scale)")
        ax.set_ylabel("percentile (logit scale)")
        ax.set_title("Latency per class (marks: each class's e2e targets; x = breached)")
        ax.legend(loc="lower right", fontsize=8, labelcolor=INK)
        return to_svg(fig)
