"""The audit as markdown: ten sections in a fixed order, every figure from the report."""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget._names import safe_markdown_renderer
from tailbudget.audit.report import AuditReport
from tailbudget.report import audit_view as view
from tailbudget.report.audit_view import STAGE_RATIO, STAGE_RATIO_NOTE
from tailbudget.report.objectives_md import classes_section, objectives_section

SECTIONS = (
    "Objectives",
    "Provenance",
    "Snapshot",
    "Stages",
    "Slow vs fast",
    "Input shape",
    "Cohorts",
    "Cold start",
    "Hypotheses",
    "Ranking",
    "Recommendation",
)


_ms = fmt.ms


def _cell(text: str) -> str:
    """A table cell that stays one cell: `|` escaped, line breaks folded (values from the
    log, such as cohort values, may hold either)."""
    return " ".join(str(text).replace("\\", "\\\\").replace("|", "\\|").split())


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return out


@safe_markdown_renderer
def audit_markdown(r: AuditReport, *, title: str | None = None) -> str:
    """Render the report as markdown (titled with the service's name unless `title` is given)."""
    lines: list[str] = [f"# {' '.join((title or view.title(r)).split())}", ""]
    # The answer before the evidence: the verdict, and which way the recommendation goes.
    weak = f" ({view.WEAK})" if r.recommendation.weak else ""
    lines += [
        f"**{view.verdict_line(r)}** Recommendation: **{r.recommendation.choice}**{weak} "
        "(see Recommendation).",
        "",
    ]
    for name, body in zip(SECTIONS, _bodies(r), strict=True):
        lines += [f"## {name}", "", *body, ""]
        if name == "Objectives" and r.classes is not None:
            lines += ["## Classes", "", *classes_section(r), ""]
    return "\n".join(lines).rstrip() + "\n"


def _bodies(r: AuditReport) -> list[list[str]]:
    return [
        objectives_section(r),
        _provenance(r),
        _snapshot(r),
        _stages(r),
        _tail(r),
        _shape(r),
        _cohorts(r),
        _cold(r),
        _hypotheses(r),
        _ranking(r),
        _recommendation(r),
    ]


def _recommendation(r: AuditReport) -> list[str]:
    rec = r.recommendation
    mark = f" ({view.WEAK})" if rec.weak else ""
    return [f"**{rec.choice}**{mark}: {rec.text}"]


def _provenance(r: AuditReport) -> list[str]:
    p = r.provenance
    rows = r.rows
    out = [
        f"- source: `{p.source}` ({p.format}), engine {p.engine}, tailbudget {p.version}, "
        f"generated {p.generated_at}",
        f"- rows: {fmt.count(rows.total)} read, {fmt.count(rows.used)} used, "
        f"{fmt.count(rows.rejected)} rejected",
    ]
    for reason, n in sorted(rows.rejected_reasons.items()):
        out.append(f"  - {reason}: {fmt.count(n)}")
    if rows.failed:
        out.append(f"- failed without a latency (errors): {fmt.count(rows.failed)}")
        out += [
            f"  - {reason}: {fmt.count(n)}" for reason, n in sorted(rows.failed_reasons.items())
        ]
    out += [f"- {n}" for n in p.notes]
    return out


def _snapshot(r: AuditReport) -> list[str]:
    s = r.snapshot
    rows = []
    for p in ("p50", "p95", "p99"):
        target = getattr(r.slo, p)
        verdict = s.verdict.get(p, "-")
        gate = " (gated)" if p in r.gated else ""
        rows.append([p, _ms(getattr(s, p)), _ms(target), verdict + gate])
    rows.append(["max", _ms(s.max), "-", "-"])
    rows.append(["mean (not an SLO figure)", _ms(s.mean), "-", "-"])
    out = _table(["", "ms", "SLO", "verdict"], rows)
    out.append("")
    if s.breach_rate_per_min is not None and s.duration_min is not None:
        out.append(
            f"{fmt.counted(s.count, 'request')} over {fmt.number(s.duration_min)} min; "
            f"{fmt.number(s.breach_rate_per_min)} requests/min slower than the "
            f"{r.goodput.target} target."
        )
    g = r.goodput
    if g.target_ms is not None and set(g.thresholds) <= {"e2e"}:
        out.append(
            f"Goodput: {fmt.share(g.share)} of requests are not errors and finish within "
            f"{_ms(g.target_ms)} ms ({g.target}); errors {fmt.share(g.error_share)}."
        )
    else:
        out.append(
            f"Goodput: {fmt.share(g.share)} of requests meet every threshold (see Objectives); "
            f"errors {fmt.share(g.error_share)}."
        )
    if r.baseline:
        out += ["", "Against the baseline (95% bootstrap interval of the change):", ""]
        out += _table(
            ["", "before", "after", "change", "interval"],
            [
                [
                    b.percentile,
                    _ms(b.before),
                    _ms(b.after),
                    fmt.signed_ms(b.change),
                    f"[{fmt.signed_ms(b.ci_low)}, {fmt.signed_ms(b.ci_high)}]",
                ]
                for b in r.baseline
            ],
        )
    return out


def _stages(r: AuditReport) -> list[str]:
    out: list[str] = []
    if r.overlap.nested:
        out += [
            f"Stages add up to more than the total in {fmt.share(r.overlap.share)} of requests "
            "(nested or parallel calls): no `unattributed` slice is derived.",
            "",
        ]
    if not r.stages:
        return [*out, "The log has no per-stage columns."]

    def budget(b: dict[str, float] | None) -> str:
        return "-" if not b else ", ".join(f"{k} {_ms(v)}" for k, v in b.items())

    out += _table(
        ["stage", "p50", "p95", "p99", STAGE_RATIO, "budget"],
        [
            [
                s.name,
                _ms(s.p50),
                _ms(s.p95),
                _ms(s.p99),
                fmt.share(s.share_of_p99),
                budget(s.budget),
            ]
            for s in r.stages
        ],
    )
    return [*out, "", STAGE_RATIO_NOTE]


def _tail(r: AuditReport) -> list[str]:
    t = r.tail
    out = [
        f"Slow group: total in [{_ms(t.slow_range_ms[0])}, {_ms(t.slow_range_ms[1])}] ms "
        f"({fmt.counted(t.n_slow, 'request')}); fast group: [{_ms(t.fast_range_ms[0])}, "
        f"{_ms(t.fast_range_ms[1])}] ms ({fmt.count(t.n_fast)}).",
        "",
    ]
    caveat = view.tail_caveat(r)
    if caveat:
        out += [f"**{caveat}**", ""]
    if not t.deltas:
        return [*out, "No stages to compare."]
    out += _table(
        ["stage", "mean slow", "mean fast", "delta"],
        [[d.stage, _ms(d.mean_slow), _ms(d.mean_fast), fmt.signed_ms(d.delta)] for d in t.deltas],
    )
    out += ["", f"Tail driver: **{t.driver}**{f' ({view.WEAK})' if t.weak else ''}."]
    return out + _culprits(r)


def _culprits(r: AuditReport) -> list[str]:
    out: list[str] = []
    if r.nesting:
        pairs = "; ".join(f"{n.outer} contains {n.inner} ({n.how})" for n in r.nesting)
        out += ["", f"Nested stages: {pairs}."]
    if r.culprits:
        out += ["", f"Culprits, most likely first. {view.CULPRIT_SCORE}", ""]
        out += _table(
            ["stage", "score", "evidence"],
            [[c.stage, fmt.r2(c.score), c.evidence] for c in r.culprits],
        )
    return out


def _shape(r: AuditReport) -> list[str]:
    if not r.shape:
        return ["No covariates given (shape columns)."]
    shown, folded = view.split_fits(r.shape)
    rows = [
        [s.stage, s.covariate, fmt.r2(s.r2), fmt.number(s.slope), "flag" if s.flag else ""]
        for s in shown
    ]
    out = _table(["stage", "covariate", "R²", "slope ms/unit", ""], rows)
    if folded:
        out.append(f"\n({view.folded_note(len(folded))})")
    return out


def _cohorts(r: AuditReport) -> list[str]:
    if not r.cohorts:
        return ["No cohort dimensions given (cohort columns)."]
    return _table(
        ["dim", "value", "requests", "share", "p99", "vs global", "share of slow", ""],
        [
            [
                c.dim,
                c.value,
                fmt.count(c.n),
                fmt.share(c.share),
                _ms(c.p99),
                fmt.signed_ms(c.delta_vs_global),
                fmt.share(c.share_of_slow),
                ", ".join(m for m, on in (("flag", c.flag), (view.WEAK, c.weak)) if on),
            ]
            for c in r.cohorts
        ],
    )


def _cold(r: AuditReport) -> list[str]:
    c = r.cold_start
    if c is None:
        return ["The log has no timestamps: no cold-start check."]
    if c.verdict == "no_events":
        return [f"{view.cold_verdict(c)} p99 {_ms(c.unfiltered_p99)} ms."]
    return [
        f"{len(c.events)} events, window {c.window_min:g} min, {fmt.count(c.n_cold)} requests "
        f"inside. {view.cold_verdict(c)} Verdict: **{c.verdict}**."
    ]


def _hypotheses(r: AuditReport) -> list[str]:
    if not r.hypotheses:
        return ["No hypothesis rule fired."]
    return [
        f"- **{h.kind}** ({h.stage or 'whole request'}){f' ({view.WEAK})' if h.weak else ''}: "
        f"{view.hypothesis_text(h)}"
        for h in r.hypotheses
    ]


def _ranking(r: AuditReport) -> list[str]:
    out: list[str] = []
    if r.ranking:
        out += _table(
            [
                "fix",
                "stage",
                *view.RANKING_HEAD[:2],
                "hours",
                "risk",
                "reversible",
                view.RANKING_HEAD[2],
            ],
            [
                [
                    f.fix,
                    f.stage or "-",
                    *view.ranking_figures(f),
                    fmt.number(f.hours),
                    f.risk,
                    "yes" if f.reversible else "no",
                    fmt.number(f.score),
                ]
                for f in r.ranking
            ],
        )
        out += ["", "Counterfactuals:"]
        out += [f"- {f.fix}: {f.counterfactual}" for f in r.ranking]
    elif not r.refusals:
        out.append("No fix to rank.")
    if r.refusals:
        out += [""] if out else []
        out += [f"- Not done: {x}" for x in r.refusals]
    return out
