"""The audit page's objectives section: the table every reader starts from, goodput, and
the cause and fix found for each breached objective."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailbudget.report.html.page import cell, esc, fmt_pct, is_num, not_available, table

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
    return body
