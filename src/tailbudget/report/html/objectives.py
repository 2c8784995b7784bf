"""The audit page's objectives section: the table every reader starts from, goodput, and
the cause and fix found for each breached objective."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tailbudget.budget.objectives import parse_percentile
from tailbudget.report.html.page import (
    cell,
    esc,
    figure,
    fmt_pct,
    is_num,
    not_available,
    table,
)

__all__ = ["objectives_html"]


def _rows(r: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    v = r.get(key)
    return [x for x in v if isinstance(x, Mapping)] if isinstance(v, list) else []


def objectives_html(r: Mapping[str, Any]) -> str:
    """The objectives table, goodput line and breached-objective drivers."""
    objs = _rows(r, "objectives")
    if not objs:
        return not_available("no objectives were given")
    body = table(
        ["objective", "target ms", "measured ms", "verdict", "gated", "from"],
        [
            [
                cell(
                    f"{o.get('metric')} {o.get('percentile')}"
                    + (f" at {o['output_tokens']:,} tokens" if o.get("output_tokens") else "")
                ),
                cell(o.get("target_ms"), "ms"),
                cell(o.get("measured_ms"), "ms"),
                cell(o.get("verdict")),
                cell("yes" if o.get("gated") else "no"),
                cell(o.get("n"), "int"),
            ]
            for o in objs
        ],
        numeric=[1, 2, 5],
    )
    g = r.get("goodput")
    if isinstance(g, Mapping) and is_num(g.get("share")) and g.get("thresholds"):
        within = ", ".join(f"{esc(m)} &le; {float(v):,.1f} ms" for m, v in g["thresholds"].items())
        minimum = (
            f" (minimum {fmt_pct(g['min'], 1)}: {esc(g.get('verdict'))})"
            if is_num(g.get("min"))
            else ""
        )
        body += (
            f"<p>Goodput {fmt_pct(g['share'], 1)}{minimum}: requests that are not errors "
            f"and meet {within}.</p>"
        )
    notes = [f"{o.get('metric')} {o.get('percentile')}: {o['note']}" for o in objs if o.get("note")]
    causes = [h for h in _rows(r, "hypotheses") if h.get("objective")]
    items = [
        f"<li><strong>{esc(h['objective'])}</strong>: {esc(h.get('evidence'))}</li>" for h in causes
    ]
    items += [f"<li>{esc(n)}</li>" for n in notes]
    if items:
        body += "<ul>" + "".join(items) + "</ul>"
    dists = r.get("distributions")
    for metric in ("ttft", "tpot"):
        points = dists.get(metric) if isinstance(dists, Mapping) else None
        mine = [o for o in objs if o.get("metric") == metric]
        if points and mine:
            breached = [o for o in mine if o.get("verdict") == "breach"]
            takeaway = (
                f"{metric.upper()} breaches {', '.join(str(o['percentile']) for o in breached)}"
                if breached
                else f"{metric.upper()} meets every {metric} objective"
            )
            body += figure(
                f"{metric}-cdf", takeaway, quantile_chart(metric, points, mine), f"{metric} CDF"
            )
    return body


def quantile_chart(
    metric: str, points: Sequence[Mapping[str, Any]], objs: Sequence[Mapping[str, Any]]
) -> str | None:
    """The metric's CDF (log-x, logit-y) with each objective's target and measured point."""
    pts = sorted(
        (float(p["ms"]), float(p["q"]))
        for p in points
        if is_num(p.get("ms")) and is_num(p.get("q")) and float(p["ms"]) > 0 and 0 < p["q"] < 1
    )
    if len(pts) < 2:
        return None
    from matplotlib.ticker import NullLocator

    from tailbudget.report.html.svg import BLUE, INK, new_figure, style, to_svg

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
            q = parse_percentile(str(o.get("percentile")))[1]
            ln = ax.axvline(
                float(o["target_ms"]),
                color=INK,
                ls="--",
                lw=1.1,
                label=f"{o['percentile']} target {float(o['target_ms']):,.6g} ms",
            )
            ln.set_gid(f"tb-{metric}-cdf-target-{i}")
            if is_num(o.get("measured_ms")):
                ax.scatter([float(o["measured_ms"])], [q], color=INK, zorder=5, s=22)
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(f"{metric} (ms, log scale)")
        ax.set_ylabel("share of requests at or below (logit scale)")
        ax.set_title(f"{metric.upper()} distribution vs its objectives")
        ax.legend(loc="lower right")
        return to_svg(fig)
