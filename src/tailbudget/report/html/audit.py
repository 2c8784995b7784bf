"""The audit report as one self-contained HTML page (sections in the markdown report's order)."""

from __future__ import annotations

from collections.abc import Callable

from tailbudget import _fmt as fmt
from tailbudget._units import PERCENTILES
from tailbudget.audit.report import AuditReport, ShapeRow
from tailbudget.report import audit_view as view
from tailbudget.report.html import charts, page, takeaways
from tailbudget.report.html.classes import classes_html
from tailbudget.report.html.objectives import objectives_html
from tailbudget.report.html.page import Cell, cards, cell, esc, figure, kv, not_available, table
from tailbudget.report.html.timelines import cold_start_chart

_SHAPE_CHARTS = 4  # at most this many flagged fits get a chart; all are in the table


def _why(r: AuditReport, default: str, *words: str) -> str:
    """The audit's own refusal that mentions one of `words`, else `default`."""
    for text in r.refusals:
        if any(w in text.lower() for w in words):
            return text
    return default


def _flag(flagged: bool, weak: bool = False) -> Cell:
    text = "flagged" if flagged else ""
    if weak:
        text = f"{text}, {view.WEAK}" if text else view.WEAK
    return Cell(text, None, "flag")


def _weak(weak: bool) -> str:
    return f' <span class="flag">({view.WEAK})</span>' if weak else ""


def _reasons(title: str, unit: str, reasons: dict[str, int]) -> str:
    if not reasons:
        return ""
    return f"<h3>{esc(title)}</h3>" + table(
        ["reason", unit], [[cell(k), cell(v, "int")] for k, v in reasons.items()], numeric=[1]
    )


def _provenance(r: AuditReport) -> str:
    prov, rows = r.provenance, r.rows
    pairs = [
        (k, v)
        for k, v in (
            ("source", prov.source),
            ("format", prov.format),
            ("engine", prov.engine),
            ("generated_at", prov.generated_at),
            ("version", prov.version),
        )
    ]
    pairs.append(
        (
            "rows",
            f"{fmt.count(rows.used)} used of {fmt.count(rows.total)} read, "
            f"{fmt.count(rows.rejected)} rejected",
        )
    )
    if rows.failed:
        pairs.append(("failed without a latency (errors)", fmt.count(rows.failed)))
    out = kv(pairs)
    out += _reasons("Failed requests", "requests", rows.failed_reasons)
    out += _reasons("Rejected rows", "rows", rows.rejected_reasons)
    if prov.notes:
        out += "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in prov.notes) + "</ul>"
    return out


def _snapshot_cards(r: AuditReport) -> str:
    snap = r.snapshot
    items = []
    for p in PERCENTILES:
        v = snap.verdict.get(p)
        target = getattr(r.slo, p)
        label = f"{p} ms" + (f" / SLO {fmt.ms(target)}" if target is not None else "")
        items.append((label, fmt.ms(getattr(snap, p)) + (f" {v}" if v else ""), v or ""))
    items += [("max ms", fmt.ms(snap.max), ""), ("mean ms", fmt.ms(snap.mean), "")]
    items += [("requests", fmt.count(snap.count), ""), ("errors", fmt.count(snap.errors), "")]
    if snap.breach_rate_per_min is not None:
        items.append(("requests over SLO / min", fmt.number(snap.breach_rate_per_min), ""))
    items.append(("goodput (every threshold)", fmt.share(r.goodput.share, 1), ""))
    return cards(items)


def _baseline(r: AuditReport) -> str:
    if not r.baseline:
        return ""
    # `change` and its 95% interval are in ms (after - before), as the audit reports them.
    return "<h3>Against the baseline</h3>" + table(
        ["percentile", "before ms", "after ms", "change ms", "change", "95% CI ms"],
        [
            [
                cell(b.percentile),
                cell(b.before, "ms"),
                cell(b.after, "ms"),
                cell(b.change, "ms"),
                cell(b.relative_change, "pct"),
                Cell(f"{fmt.ms(b.ci_low)} .. {fmt.ms(b.ci_high)}", None, "num"),
            ]
            for b in r.baseline
        ],
        numeric=[1, 2, 3, 4, 5],
    )


def _snapshot(r: AuditReport) -> str:
    if r.snapshot.count == 0:
        return not_available("no end-to-end latency in the report")
    out = _snapshot_cards(r)
    out += (
        figure("cdf", takeaways.cdf(r.snapshot, r.slo), charts.cdf_chart(r), "latency CDF")
        if r.cdf
        else not_available("no CDF points in the report")
    )
    return out + _baseline(r)


def _stages(r: AuditReport) -> str:
    rows = r.stages
    if not rows:
        return not_available(_why(r, "the log has no per-stage columns", "stage"))
    body = table(
        [
            "stage",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "budget p50",
            "budget p95",
            "budget p99",
            view.STAGE_RATIO,
        ],
        [
            [cell(s.name)]
            + [cell(getattr(s, p), "ms") for p in PERCENTILES]
            + [cell((s.budget or {}).get(p), "ms") for p in PERCENTILES]
            + [cell(s.share_of_p99, "pct")]
            for s in rows
        ],
        numeric=list(range(1, 8)),
    )
    body += f"<p>{esc(view.STAGE_RATIO_NOTE)}</p>"
    if r.overlap.share > 0:
        body += (
            f"<p>Stages overlap (nested or concurrent) in {fmt.share(r.overlap.share, 1)} of "
            "requests, so their sum can exceed the total.</p>"
        )
    return (
        figure("stages", takeaways.stages(rows), charts.stage_chart(rows), "per-stage percentiles")
        + body
    )


def _tail(r: AuditReport) -> str:
    tail = r.tail
    if not tail.deltas:
        return not_available(
            _why(r, "no per-stage columns to compare slow and fast requests", "slow", "stage")
        )
    body = table(
        ["stage", "mean slow ms", "mean fast ms", "delta ms"],
        [
            [
                cell(d.stage),
                cell(d.mean_slow, "ms"),
                cell(d.mean_fast, "ms"),
                cell(d.delta, "ms"),
            ]
            for d in tail.deltas
        ],
        numeric=[1, 2, 3],
    )
    driver = (
        f"<p>Driver: <strong>{esc(tail.driver)}</strong>{_weak(tail.weak)}</p>"
        if tail.driver
        else ""
    )
    caveat = view.tail_caveat(r)
    if caveat is not None:
        driver = f'<p class="flag">{esc(caveat)}</p>' + driver
    groups = [
        f"{name}: {fmt.count(n)} requests, {fmt.ms(span[0])} to {fmt.ms(span[1])} ms"
        for name, n, span in (
            ("slow", tail.n_slow, tail.slow_range_ms),
            ("fast", tail.n_fast, tail.fast_range_ms),
        )
        if len(span) == 2
    ]
    if groups:
        driver += f"<p>{esc('; '.join(groups))}.</p>"
    return (
        figure(
            "delta",
            takeaways.delta(tail),
            charts.delta_chart(tail),
            "slow-vs-fast delta per stage",
        )
        + driver
        + body
        + _culprits(r)
    )


def _culprits(r: AuditReport) -> str:
    out = ""
    if r.culprits:
        out += f"<h3>Culprits</h3><p>{esc(view.CULPRIT_SCORE)}</p>" + table(
            ["stage", "score", "evidence"],
            [[cell(c.stage), cell(c.score, "r2"), cell(c.evidence, "long")] for c in r.culprits],
            numeric=[1],
        )
    if r.nesting:
        pairs = "; ".join(f"{n.outer} contains {n.inner}" for n in r.nesting)
        out += f"<p>Nested stages: {esc(pairs)}.</p>"
    return out


def _fit_table(rows: list[ShapeRow]) -> str:
    return table(
        ["stage", "covariate", "R\u00b2", "slope ms/unit", "flag"],
        [
            [
                cell(s.stage),
                cell(s.covariate),
                cell(s.r2, "r2"),
                cell(s.slope, "num"),
                _flag(s.flag),
            ]
            for s in rows
        ],
        numeric=[2, 3],
    )


def _shape(r: AuditReport) -> str:
    rows = r.shape
    if not rows:
        return not_available(
            _why(r, "no input-shape columns (e.g. seq_len) in the log", "shape", "covariate")
        )
    # The markdown report's fold: the same fits shown, the same ones folded.
    shown, folded = view.split_fits(rows)
    body = _fit_table(shown)
    if folded:
        body += (
            f"<details><summary>{esc(view.folded_note(len(folded)))}</summary>"
            + _fit_table(folded)
            + "</details>"
        )
    # Chart the fits the audit flagged; when none is, the strongest one alone.
    ranked = sorted((s for s in rows if s.profile), key=lambda s: -s.r2)
    ranked = [s for s in ranked if s.flag] or ranked[:1]
    figs = "".join(
        figure(
            f"shape-{i}",
            takeaways.shape(s),
            charts.shape_chart(s, str(i)),
            f"{s.stage} vs {s.covariate}",
        )
        for i, s in enumerate(ranked[:_SHAPE_CHARTS])
    )
    return (figs or not_available("no binned profile in the shape results")) + body


def _cohorts(r: AuditReport) -> str:
    rows = r.cohorts
    if not rows:
        return not_available(
            _why(r, "no cohort columns (e.g. route, model_variant) in the log", "cohort")
        )
    body = table(
        [
            "dimension",
            "value",
            "requests",
            "share",
            "p99 ms",
            "vs global ms",
            "share of slow",
            "flag",
        ],
        [
            [
                cell(c.dim),
                cell(c.value),
                cell(c.n, "int"),
                cell(c.share, "pct"),
                cell(c.p99, "ms"),
                cell(c.delta_vs_global, "ms"),
                cell(c.share_of_slow, "pct"),
                _flag(c.flag, c.weak),
            ]
            for c in rows
        ],
        numeric=[2, 3, 4, 5, 6],
    )
    svg = charts.cohort_chart(rows, r.snapshot.p99, r.slo.p99)
    return figure("cohorts", takeaways.cohorts(rows), svg, "cohort p99 vs traffic share") + body


def _cold(r: AuditReport) -> str:
    cold = r.cold_start
    if cold is None:
        return not_available(_why(r, "no cold-start analysis in the report", "cold", "timestamp"))
    verdict = view.cold_verdict(cold)
    pairs = [
        ("verdict", cold.verdict),
        ("window", f"{fmt.number(cold.window_min)} min"),
        ("p99, all requests", f"{fmt.ms(cold.unfiltered_p99)} ms"),
        ("p99, cold windows left out", f"{fmt.ms(cold.filtered_p99)} ms"),
        ("requests in cold windows", fmt.count(cold.n_cold)),
    ]
    if cold.events:
        pairs.append(("events", "; ".join(f"{e.t} {e.event}" for e in cold.events)))
    if cold.timeline:
        fig = figure("cold", verdict, cold_start_chart(cold, r.slo.p99), "cold-start timeline")
    else:
        fig = f'<p class="takeaway"><strong>{esc(verdict)}</strong></p>' + not_available(
            "no per-minute timeline (the log has no timestamps)"
        )
    return fig + kv(pairs)


def _hypotheses(r: AuditReport) -> str:
    if not r.hypotheses:
        return not_available(_why(r, "no hypothesis was supported by the data", "hypothes"))
    return table(
        ["kind", "stage", "evidence"],
        [
            [
                cell(f"{h.kind} ({view.WEAK})" if h.weak else h.kind),
                cell(h.stage or "-"),
                cell(view.hypothesis_text(h), "long"),
            ]
            for h in r.hypotheses
        ],
    )


def _ranking(r: AuditReport) -> str:
    if r.ranking:
        said = (
            "<p>Fixes ranked by ms saved per engineering hour (score), on the objective each "
            "row names (e2e p99 unless it names another).</p>"
        )
        out = said + table(
            [
                "fix",
                "stage",
                *view.RANKING_HEAD[:2],
                "hours",
                "risk",
                "reversible",
                f"score ({view.RANKING_HEAD[2]})",
                "how it was estimated",
            ],
            [
                [
                    cell(f.fix),
                    cell(f.stage or "-"),
                    *(cell(x) for x in view.ranking_figures(f)),
                    cell(f.hours, "num"),
                    cell(f.risk),
                    cell("yes" if f.reversible else "no"),
                    cell(f.score, "num"),
                    cell(f.counterfactual or "-", "long"),
                ]
                for f in r.ranking
            ],
            numeric=[4, 7],
        )
    else:
        out = not_available(r.refusals[0] if r.refusals else "no fix could be ranked")
    if r.refusals:
        items = "".join(f"<li>{esc(x)}</li>" for x in r.refusals)
        out += f"<h3>Refused</h3><ul>{items}</ul>"
    return out


def _recommendation(r: AuditReport) -> str:
    rec = r.recommendation
    return (
        f'<div class="rec"><p><strong>{esc(rec.choice)}</strong>{_weak(rec.weak)}</p>'
        f"<p>{esc(rec.text)}</p></div>"
    )


def _verdict(r: AuditReport) -> str:
    """The verdict and what to do about it, before any evidence."""
    cls = "bad" if r.breaches_gate() else "ok"
    return f'<p class="verdict {cls}"><strong>{esc(view.verdict_line(r))}</strong></p>' + (
        _recommendation(r)
    )


VERDICT = ("verdict", "Verdict", _verdict)
"""The page's first section; the markdown report keeps its own order."""

SECTIONS: tuple[tuple[str, str, Callable[[AuditReport], str]], ...] = (
    ("objectives", "Objectives", objectives_html),
    ("provenance", "Provenance", _provenance),
    ("snapshot", "Snapshot", _snapshot),
    ("stages", "Stages", _stages),
    ("slow-vs-fast", "Slow vs fast", _tail),
    ("shape", "Input shape", _shape),
    ("cohorts", "Cohorts", _cohorts),
    ("cold-start", "Cold start", _cold),
    ("hypotheses", "Hypotheses", _hypotheses),
    ("ranking", "Ranking", _ranking),
    ("recommendation", "Recommendation", _recommendation),
)


def render_audit_html(report: AuditReport) -> str:
    """Render an audit report as one self-contained HTML page."""
    prov = report.provenance
    sub = f"Generated {prov.generated_at}" if prov.generated_at else "tailbudget audit"
    if prov.version:
        sub += f" by tailbudget {prov.version}"
    sections = SECTIONS
    if report.classes is not None:  # beside the service-wide objectives, when asked for
        sections = (SECTIONS[0], ("classes", "Classes", classes_html), *SECTIONS[1:])
    parts = page.render_sections(report, (VERDICT, *sections))
    return page.document(view.title(report), sub, parts)
