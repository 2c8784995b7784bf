"""The audit as markdown: ten sections in a fixed order, every figure from the report."""

from __future__ import annotations

from tailbudget.audit.report import AuditReport

SECTIONS = (
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


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def audit_markdown(r: AuditReport, *, title: str = "Latency audit") -> str:
    """Render the report as markdown."""
    lines: list[str] = [f"# {title}", ""]
    for name, body in zip(SECTIONS, _bodies(r), strict=True):
        lines += [f"## {name}", "", *body, ""]
    return "\n".join(lines).rstrip() + "\n"


def _bodies(r: AuditReport) -> list[list[str]]:
    return [
        _provenance(r),
        _snapshot(r),
        _stages(r),
        _tail(r),
        _shape(r),
        _cohorts(r),
        _cold(r),
        _hypotheses(r),
        _ranking(r),
        [f"**{r.recommendation.choice}**: {r.recommendation.text}"],
    ]


def _provenance(r: AuditReport) -> list[str]:
    p = r.provenance
    rows = r.rows
    out = [
        f"- source: `{p.source}` ({p.format}), engine {p.engine}, tailbudget {p.version}, "
        f"generated {p.generated_at}",
        f"- rows: {rows.total:,} read, {rows.used:,} used, {rows.rejected:,} rejected",
    ]
    for reason, n in sorted(rows.rejected_reasons.items()):
        out.append(f"  - {reason}: {n:,}")
    if rows.failed:
        out.append(f"- failed without a latency (errors): {rows.failed:,}")
        out += [f"  - {reason}: {n:,}" for reason, n in sorted(rows.failed_reasons.items())]
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
            f"{s.count:,} requests over {s.duration_min:,.1f} min; "
            f"{s.breach_rate_per_min:,.2f} requests/min slower than the {r.goodput.target} target."
        )
    g = r.goodput
    out.append(
        f"Goodput: {g.share:.2%} of requests are not errors and finish within "
        f"{g.target_ms:,.0f} ms ({g.target}); errors {g.error_share:.2%}."
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
                    f"{b.change:+,.0f}",
                    f"[{b.ci_low:+,.0f}, {b.ci_high:+,.0f}]",
                ]
                for b in r.baseline
            ],
        )
    return out


def _stages(r: AuditReport) -> list[str]:
    out: list[str] = []
    if r.overlap.nested:
        out += [
            f"Stages add up to more than the total in {r.overlap.share:.1%} of requests "
            "(nested or parallel calls): no `unattributed` slice is derived.",
            "",
        ]
    if not r.stages:
        return [*out, "The log has no per-stage columns."]

    def budget(b: dict[str, float] | None) -> str:
        return "-" if not b else ", ".join(f"{k} {v:,.0f}" for k, v in b.items())

    out += _table(
        ["stage", "p50", "p95", "p99", "share of p99", "budget"],
        [
            [s.name, _ms(s.p50), _ms(s.p95), _ms(s.p99), f"{s.share_of_p99:.0%}", budget(s.budget)]
            for s in r.stages
        ],
    )
    return out


def _tail(r: AuditReport) -> list[str]:
    t = r.tail
    out = [
        f"Slow group: total in [{_ms(t.slow_range_ms[0])}, {_ms(t.slow_range_ms[1])}] ms "
        f"({t.n_slow:,} requests); fast group: [{_ms(t.fast_range_ms[0])}, "
        f"{_ms(t.fast_range_ms[1])}] ms ({t.n_fast:,}).",
        "",
    ]
    if not t.deltas:
        return [*out, "No stages to compare."]
    out += _table(
        ["stage", "mean slow", "mean fast", "delta"],
        [[d.stage, _ms(d.mean_slow), _ms(d.mean_fast), f"{d.delta:+,.0f}"] for d in t.deltas],
    )
    out += ["", f"Tail driver: **{t.driver}**."]
    return out + _culprits(r)


def _culprits(r: AuditReport) -> list[str]:
    out: list[str] = []
    if r.nesting:
        pairs = "; ".join(f"{n.outer} contains {n.inner} ({n.how})" for n in r.nesting)
        out += ["", f"Nested stages: {pairs}."]
    if r.culprits:
        out += ["", "Culprits, most likely first:", ""]
        out += _table(
            ["stage", "score", "evidence"],
            [[c.stage, f"{c.score:.2f}", c.evidence] for c in r.culprits],
        )
    return out


def _shape(r: AuditReport) -> list[str]:
    if not r.shape:
        return ["No covariates given (`--shape COL`)."]
    rows = [
        [s.stage, s.covariate, f"{s.r2:.2f}", f"{s.slope:,.4g}", "flag" if s.flag else ""]
        for s in r.shape[:12]
    ]
    out = _table(["stage", "covariate", "R²", "slope ms/unit", ""], rows)
    if len(r.shape) > 12:
        out.append(f"\n({len(r.shape) - 12} weaker fits omitted; all are in the JSON.)")
    return out


def _cohorts(r: AuditReport) -> list[str]:
    if not r.cohorts:
        return ["No cohort dimensions given (`--cohort COL`)."]
    return _table(
        ["dim", "value", "share", "p99", "vs global", "share of slow", ""],
        [
            [
                c.dim,
                c.value,
                f"{c.share:.1%}",
                _ms(c.p99),
                f"{c.delta_vs_global:+,.0f}",
                f"{c.share_of_slow:.1%}",
                "flag" if c.flag else "",
            ]
            for c in r.cohorts
        ],
    )


def _cold(r: AuditReport) -> list[str]:
    c = r.cold_start
    if c is None:
        return ["The log has no timestamps: no cold-start check."]
    if c.verdict == "no_events":
        return [f"No events given (`--events CSV`); p99 {_ms(c.unfiltered_p99)} ms."]
    return [
        f"{len(c.events)} events, window {c.window_min:g} min, {c.n_cold:,} requests inside: "
        f"p99 {_ms(c.unfiltered_p99)} ms with them, {_ms(c.filtered_p99)} ms without. "
        f"Verdict: **{c.verdict}**."
    ]


def _hypotheses(r: AuditReport) -> list[str]:
    if not r.hypotheses:
        return ["No hypothesis rule fired."]
    return [f"- **{h.kind}** ({h.stage or 'whole request'}): {h.evidence}" for h in r.hypotheses]


def _ranking(r: AuditReport) -> list[str]:
    out: list[str] = []
    if r.ranking:
        out += _table(
            ["fix", "stage", "p99 saved ms", "p99 after", "hours", "risk", "reversible", "ms/hour"],
            [
                [
                    f.fix,
                    f.stage or "-",
                    _ms(f.p99_saved_ms),
                    _ms(f.p99_after_ms),
                    f"{f.hours:g}",
                    f.risk,
                    "yes" if f.reversible else "no",
                    f"{f.score:,.1f}",
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
