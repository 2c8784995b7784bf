"""The audit report as one self-contained HTML page (sections in the markdown report's order)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tailbudget._units import PERCENTILES
from tailbudget.audit.report import AuditReport, ColdStart
from tailbudget.report import audit_view as view
from tailbudget.report import fmt
from tailbudget.report.html import charts, page, takeaways
from tailbudget.report.html.objectives import objectives_html
from tailbudget.report.html.page import (
    Cell,
    cards,
    cell,
    esc,
    figure,
    fmt_ms,
    fmt_pct,
    is_num,
    kv,
    not_available,
    table,
)
from tailbudget.report.html.timelines import cold_start_chart

_SHAPE_CHARTS = 4  # at most this many flagged fits get a chart; all are in the table


def _map(report: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = report.get(key)
    return v if isinstance(v, Mapping) else {}


def _list(report: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    v = report.get(key)
    return [x for x in v if isinstance(x, Mapping)] if isinstance(v, list) else []


def _why(r: Mapping[str, Any], default: str, *words: str) -> str:
    """The audit's own refusal that mentions one of `words`, else `default`."""
    for text in r.get("refusals") or []:
        if any(w in str(text).lower() for w in words):
            return str(text)
    return default


def _flag(value: Any, weak: Any = False) -> Cell:
    text = "flagged" if value is True else "" if value in (None, False) else str(value)
    if weak is True:
        text = f"{text}, {view.WEAK}" if text else view.WEAK
    return Cell(text, None, "flag")


def _weak(entry: Mapping[str, Any]) -> str:
    return f' <span class="flag">({view.WEAK})</span>' if entry.get("weak") is True else ""


def _provenance(r: Mapping[str, Any]) -> str:
    prov, rows = _map(r, "provenance"), _map(r, "rows")
    if not prov and not rows:
        return not_available("the report carries no provenance or row counts")
    pairs = [
        (k, str(prov[k]))
        for k in ("source", "format", "engine", "generated_at", "version")
        if prov.get(k) is not None
    ]
    if rows and all(is_num(rows.get(k)) for k in ("used", "total")):
        rejected = rows.get("rejected", 0)
        pairs.append(
            ("rows", f"{rows['used']:,} used of {rows['total']:,} read, {rejected:,} rejected")
        )
    if rows and is_num(rows.get("failed")) and rows["failed"]:
        pairs.append(("failed without a latency (errors)", f"{rows['failed']:,}"))
    out = kv(pairs)
    failed = rows.get("failed_reasons") or {}
    if isinstance(failed, Mapping) and failed:
        out += "<h3>Failed requests</h3>" + table(
            ["reason", "requests"],
            [[cell(k), cell(v, "int")] for k, v in failed.items()],
            numeric=[1],
        )
    reasons = rows.get("rejected_reasons") or {}
    if isinstance(reasons, Mapping) and reasons:
        out += "<h3>Rejected rows</h3>" + table(
            ["reason", "rows"],
            [[cell(k), cell(v, "int")] for k, v in reasons.items()],
            numeric=[1],
        )
    notes = prov.get("notes") or []
    if notes:
        out += "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
    return out


def _snapshot(r: Mapping[str, Any]) -> str:
    snap, slo = _map(r, "snapshot"), _map(r, "slo")
    if not snap:
        return not_available("no end-to-end latency in the report")
    verdict = snap.get("verdict") or {}
    items = []
    for p in PERCENTILES:
        v = verdict.get(p) if isinstance(verdict, Mapping) else None
        target = f" / SLO {fmt_ms(slo.get(p))}" if is_num(slo.get(p)) else ""
        items.append(
            (f"{p} ms{target}", fmt_ms(snap.get(p)) + (f" {v}" if v else ""), str(v or ""))
        )
    items += [("max ms", fmt_ms(snap.get("max")), ""), ("mean ms", fmt_ms(snap.get("mean")), "")]
    if is_num(snap.get("count")):
        items.append(("requests", f"{float(snap['count']):,.0f}", ""))
    if is_num(snap.get("errors")):
        items.append(("errors", f"{float(snap['errors']):,.0f}", ""))
    if is_num(snap.get("breach_rate_per_min")):
        items.append(("requests over SLO / min", f"{float(snap['breach_rate_per_min']):,.2f}", ""))
    goodput = _map(r, "goodput")
    if is_num(goodput.get("share")):
        items.append(("goodput (every threshold)", fmt_pct(goodput["share"], 1), ""))
    out = cards(items)
    cdf = _list(r, "cdf")
    out += (
        figure("cdf", takeaways.cdf(snap, slo), charts.cdf_chart(cdf, slo, snap), "latency CDF")
        if cdf
        else not_available("no CDF points in the report")
    )
    baseline = _list(r, "baseline")
    if baseline:
        # `change` and its 95% interval are in ms (after - before), as the audit reports them.
        out += "<h3>Against the baseline</h3>" + table(
            ["percentile", "before ms", "after ms", "change ms", "change", "95% CI ms"],
            [
                [
                    cell(b.get("percentile")),
                    cell(b.get("before"), "ms"),
                    cell(b.get("after"), "ms"),
                    cell(b.get("change"), "ms"),
                    cell(
                        float(b["change"]) / float(b["before"])
                        if is_num(b.get("change")) and is_num(b.get("before")) and b["before"]
                        else None,
                        "pct",
                    ),
                    Cell(f"{fmt_ms(b.get('ci_low'))} .. {fmt_ms(b.get('ci_high'))}", None, "num"),
                ]
                for b in baseline
            ],
            numeric=[1, 2, 3, 4, 5],
        )
    return out


def _stages(r: Mapping[str, Any]) -> str:
    rows = _list(r, "stages")
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
            "share of p99",
        ],
        [
            [cell(s.get("name"))]
            + [cell(s.get(p), "ms") for p in PERCENTILES]
            + [cell((s.get("budget") or {}).get(p), "ms") for p in PERCENTILES]
            + [cell(s.get("share_of_p99"), "pct")]
            for s in rows
        ],
        numeric=list(range(1, 8)),
    )
    overlap = _map(r, "overlap")
    if is_num(overlap.get("share")) and float(overlap["share"]) > 0:
        share = fmt_pct(overlap["share"], 1)
        body += (
            f"<p>Stages overlap (nested or concurrent) in {share} of requests, "
            "so their sum can exceed the total.</p>"
        )
    return (
        figure("stages", takeaways.stages(rows), charts.stage_chart(rows), "per-stage percentiles")
        + body
    )


def _tail(r: Mapping[str, Any]) -> str:
    tail = _map(r, "tail")
    deltas = [d for d in tail.get("deltas") or [] if isinstance(d, Mapping)]
    if not deltas:
        return not_available(
            _why(r, "no per-stage columns to compare slow and fast requests", "slow", "stage")
        )
    body = table(
        ["stage", "mean slow ms", "mean fast ms", "delta ms"],
        [
            [
                cell(d.get("stage")),
                cell(d.get("mean_slow"), "ms"),
                cell(d.get("mean_fast"), "ms"),
                cell(d.get("delta"), "ms"),
            ]
            for d in deltas
        ],
        numeric=[1, 2, 3],
    )
    driver = (
        f"<p>Driver: <strong>{esc(tail['driver'])}</strong>{_weak(tail)}</p>"
        if tail.get("driver")
        else ""
    )
    if tail.get("weak") is True and is_num(tail.get("n_slow")):
        caveat = view.tail_caveat_for(int(tail["n_slow"]))
        driver = f'<p class="flag">{esc(caveat)}</p>' + driver
    groups = []
    for name in ("slow", "fast"):
        n, span = tail.get(f"n_{name}"), tail.get(f"{name}_range_ms")
        if is_num(n) and isinstance(span, list) and len(span) == 2:
            groups.append(
                f"{name}: {fmt.count(n)} requests, {fmt_ms(span[0])} to {fmt_ms(span[1])} ms"
            )
    if groups:
        driver += f"<p>{esc('; '.join(groups))}.</p>"
    return (
        figure(
            "delta",
            takeaways.delta(tail),
            charts.delta_chart(deltas),
            "slow-vs-fast delta per stage",
        )
        + driver
        + body
        + _culprits(r)
    )


def _culprits(r: Mapping[str, Any]) -> str:
    found = [c for c in r.get("culprits") or [] if isinstance(c, Mapping)]
    nest = [n for n in r.get("nesting") or [] if isinstance(n, Mapping)]
    out = ""
    if found:
        out += "<h3>Culprits</h3>" + table(
            ["stage", "score", "evidence"],
            [
                [cell(c.get("stage")), cell(c.get("score"), "r2"), cell(c.get("evidence"), "long")]
                for c in found
            ],
            numeric=[1],
        )
    if nest:
        pairs = "; ".join(f"{n.get('outer')} contains {n.get('inner')}" for n in nest)
        out += f"<p>Nested stages: {esc(pairs)}.</p>"
    return out


def _fit_table(rows: list[Mapping[str, Any]]) -> str:
    return table(
        ["stage", "covariate", "R\u00b2", "slope ms/unit", "flag"],
        [
            [
                cell(s.get("stage")),
                cell(s.get("covariate")),
                cell(s.get("r2"), "r2"),
                cell(s.get("slope"), "num"),
                _flag(s.get("flag")),
            ]
            for s in rows
        ],
        numeric=[2, 3],
    )


def _shape(r: Mapping[str, Any]) -> str:
    rows = _list(r, "shape")
    if not rows:
        return not_available(
            _why(r, "no input-shape columns (e.g. seq_len) in the log", "shape", "covariate")
        )
    # The markdown report's fold: the same fits shown, the same ones folded.
    shown, folded = view.fold([bool(s.get("flag")) for s in rows])
    body = _fit_table([rows[i] for i in shown])
    if folded:
        body += (
            f"<details><summary>{esc(view.folded_note(len(folded)))}</summary>"
            + _fit_table([rows[i] for i in folded])
            + "</details>"
        )
    # Chart the fits the audit flagged; when none is, the strongest one alone.
    profiled = [s for s in rows if s.get("profile")]
    ranked = sorted(profiled, key=lambda s: -float(s["r2"]) if is_num(s.get("r2")) else 0.0)
    flagged = [s for s in ranked if s.get("flag")]
    ranked = flagged or ranked[:1]
    figs = "".join(
        figure(
            f"shape-{i}",
            takeaways.shape(s),
            charts.shape_chart(s, str(i)),
            f"{s.get('stage')} vs {s.get('covariate')}",
        )
        for i, s in enumerate(ranked[:_SHAPE_CHARTS])
    )
    return (figs or not_available("no binned profile in the shape results")) + body


def _cohorts(r: Mapping[str, Any]) -> str:
    rows = _list(r, "cohorts")
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
                cell(c.get("dim")),
                cell(c.get("value")),
                cell(c.get("n"), "int"),
                cell(c.get("share"), "pct"),
                cell(c.get("p99"), "ms"),
                cell(c.get("delta_vs_global"), "ms"),
                cell(c.get("share_of_slow"), "pct"),
                _flag(c.get("flag"), c.get("weak")),
            ]
            for c in rows
        ],
        numeric=[2, 3, 4, 5, 6],
    )
    svg = charts.cohort_chart(rows, _map(r, "snapshot").get("p99"), _map(r, "slo").get("p99"))
    return figure("cohorts", takeaways.cohorts(rows), svg, "cohort p99 vs traffic share") + body


def _cold(r: Mapping[str, Any]) -> str:
    cold = _map(r, "cold_start")
    if not cold:
        return not_available(_why(r, "no cold-start analysis in the report", "cold", "timestamp"))
    verdict = view.cold_verdict(ColdStart.model_validate(cold))
    pairs = [
        ("verdict", str(cold.get("verdict", "-"))),
        ("window", f"{fmt.number(cold.get('window_min'))} min"),
        ("p99, all requests", f"{fmt_ms(cold.get('unfiltered_p99'))} ms"),
        ("p99, cold windows left out", f"{fmt_ms(cold.get('filtered_p99'))} ms"),
    ]
    if is_num(cold.get("n_cold")):
        pairs.append(("requests in cold windows", fmt.count(cold["n_cold"])))
    events = [e for e in cold.get("events") or [] if isinstance(e, Mapping)]
    if events:
        pairs.append(("events", "; ".join(f"{e.get('t')} {e.get('event', '')}" for e in events)))
    if cold.get("timeline"):
        fig = figure(
            "cold",
            verdict,
            cold_start_chart(cold, _map(r, "slo").get("p99")),
            "cold-start timeline",
        )
    else:
        fig = f'<p class="takeaway"><strong>{esc(verdict)}</strong></p>' + not_available(
            "no per-minute timeline (the log has no timestamps)"
        )
    return fig + kv(pairs)


def _hypotheses(r: Mapping[str, Any]) -> str:
    rows = _list(r, "hypotheses")
    if not rows:
        return not_available(_why(r, "no hypothesis was supported by the data", "hypothes"))
    return table(
        ["kind", "stage", "evidence"],
        [
            [
                cell(f"{h.get('kind')} ({view.WEAK})" if h.get("weak") is True else h.get("kind")),
                cell(h.get("stage") or "-"),
                cell(h.get("evidence"), "long"),
            ]
            for h in rows
        ],
    )


def _ranking(r: Mapping[str, Any]) -> str:
    rows = _list(r, "ranking")
    refusals = [str(x) for x in r.get("refusals") or []]
    out = ""
    if rows:
        out = "<p>Fixes ranked by p99 ms saved per engineering hour (score).</p>" + table(
            [
                "fix",
                "stage",
                "p99 saved ms",
                "p99 after ms",
                "hours",
                "risk",
                "reversible",
                "score (ms/h)",
                "how it was estimated",
            ],
            [
                [
                    cell(f.get("fix")),
                    cell(f.get("stage") or "-"),
                    cell(f.get("p99_saved_ms"), "ms"),
                    cell(f.get("p99_after_ms"), "ms"),
                    cell(f.get("hours"), "num"),
                    cell(f.get("risk")),
                    cell("yes" if f.get("reversible") else "no"),
                    cell(f.get("score"), "num"),
                    cell(f.get("counterfactual") or "-", "long"),
                ]
                for f in rows
            ],
            numeric=[2, 3, 4, 7],
        )
    else:
        out = not_available(refusals[0] if refusals else "no fix could be ranked")
    if refusals:
        out += "<h3>Refused</h3><ul>" + "".join(f"<li>{esc(x)}</li>" for x in refusals) + "</ul>"
    return out


def _recommendation(r: Mapping[str, Any]) -> str:
    rec = _map(r, "recommendation")
    if not rec:
        return not_available("no recommendation in the report")
    choice = str(rec.get("choice", "none"))
    text = esc(rec.get("text", ""))
    return f'<div class="rec"><p><strong>{esc(choice)}</strong>{_weak(rec)}</p><p>{text}</p></div>'


SECTIONS: tuple[tuple[str, str, Callable[[Mapping[str, Any]], str]], ...] = (
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


def render_audit_html(report: AuditReport | Mapping[str, Any]) -> str:
    """Render an audit report (or its JSON dict) as one self-contained HTML page."""
    if isinstance(report, AuditReport):
        name = view.title(report)
        report = report.model_dump(mode="json")
    else:
        prov = _map(report, "provenance")
        source = str(prov.get("source") or "").rstrip("/").rsplit("/", 1)[-1]
        name = f"Latency audit: {report.get('service') or source or 'latency log'}"
    prov = _map(report, "provenance")
    sub = f"Generated {prov['generated_at']}" if prov.get("generated_at") else "tailbudget audit"
    if prov.get("version"):
        sub += f" by tailbudget {prov['version']}"
    return page.document(name, sub, page.render_sections(report, SECTIONS))
