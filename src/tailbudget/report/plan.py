"""Plan rendering: a Rich table to read at a glance, markdown, and the JSON contract."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tailbudget import _fmt as fmt
from tailbudget._names import safe_markdown_renderer
from tailbudget._units import PERCENTILES
from tailbudget.budget.plan import GateCheck, LlmSlice, ObjectiveCheck, Plan

_BAR = 16


_ms = fmt.ms


PROBLEM_LABELS = {"error": "does not fit", "warning": "warning"}
"""How a plan problem is labelled: a slice that does not fit is a finding (exit 1), not
bad input, so it never reads `error:` as a bad-input message (exit 2) does."""


VERDICT_WORDS = {
    "fits": "fits",
    "does_not_fit": "does not fit",
    "inconclusive": "inconclusive (too few requests)",
    "not_checked": "not checked",
}
"""A plan verdict in words; `inconclusive` as the audit's headline says it."""


def slo_use(free_share: float) -> str:
    """Headroom in words: '12% of the SLO free', or '928% of the SLO used' when over."""
    if free_share >= 0:
        return f"{fmt.share(free_share, 0)} of the SLO free"
    return f"{fmt.share(1 - free_share, 0)} of the SLO used"


def by_requests(plan: Plan) -> bool:
    """The plan gates on its log's whole requests (composition.measured), not the sum."""
    return plan.gating == "measured_requests"


def row_labels(plan: Plan) -> tuple[str, str, str]:
    """The additive and composed rows' names, and the sentence that says which gates."""
    if by_requests(plan):
        return (
            "additive (every stage at its own percentile at once)",
            f"composed (the log's {fmt.count(plan.composed.samples)} requests, gates)",
            "Percentiles do not add: no request is at every stage's percentile at once, and "
            "on a span table most requests call only a few stages. The composed row is what "
            "the log's requests measured end to end with these slices "
            "(composition.measured), and gates; the additive row sums every stage's own "
            "percentile.",
        )
    comp = plan.composed
    return (
        "additive (gates)",
        f"composed ({comp.method}, {fmt.count(comp.samples)} samples)",
        "Percentiles do not add: the additive row is the arithmetic each stage signs up "
        "to (and gates); the composed row is the end-to-end distribution to expect.",
    )


def share_head(plan: Plan, key: str, *, short: bool = False) -> str:
    """The stage table's slice-over-SLO column: a share of the SLO where the slices add
    up to the gated figure; where the log's requests gate (each calls some stages), a
    ratio that is not a part of a whole, and named so."""
    if by_requests(plan):
        return f"slice / {key} SLO"
    return f"{key} share" if short else f"share of {key} SLO"


def _bold_gate(label: str) -> str:
    # The gating row is bold: "**additive** (gates)".
    if "gates" not in label:
        return label
    head, _, rest = label.partition(" (")
    return f"**{head}** ({rest}"


def check_line(plan: Plan, c: GateCheck) -> str:
    """One gated percentile's check, the gating figure first (text and HTML alike)."""
    verdict = VERDICT_WORDS[c.verdict]
    if by_requests(plan):
        return (
            f"{c.percentile}: the log's requests {fmt.ms(c.composed_ms)} ms vs limit "
            f"{fmt.ms(c.limit_ms)} ms ({slo_use(c.free_share)}); the slices add to "
            f"{fmt.ms(c.additive_ms)} ms: {verdict}"
        )
    return (
        f"{c.percentile}: additive {fmt.ms(c.additive_ms)} ms vs limit "
        f"{fmt.ms(c.limit_ms)} ms ({slo_use(c.free_share)}), composed "
        f"{fmt.ms(c.composed_ms)} ms: {verdict}"
    )


def _bar(share: float) -> Text:
    filled = min(_BAR, round(share * _BAR))
    style = "red" if share > 0.5 else "yellow" if share > 0.25 else "green"
    return Text("█" * filled, style=style) + Text("·" * (_BAR - filled), style="dim")


def plan_json(plan: Plan) -> str:
    """The `plan --format json` contract (strict JSON: `null`, never NaN)."""
    return plan.to_json()


def plan_text(plan: Plan) -> str:
    """The plan as `print_plan` shows it, as plain text (no colour, no wrapping)."""
    console = Console(record=True, width=10_000, soft_wrap=True, file=io.StringIO())
    print_plan(plan, console)
    return console.export_text()


def _key(plan: Plan) -> str:
    # The strictest gated percentile is the one a reader cares about first.
    gated = plan.gates.gated
    return gated[-1] if gated else "p99"


def _environment(plan: Plan) -> str:
    if plan.environment is None:
        return "no environment: every stated objective gates"
    return f"environment {plan.environment} gates {', '.join(plan.gates.gated) or 'none'}"


def print_plan(plan: Plan, console: Console) -> None:
    """Render a plan as a Rich table with stage, slices, share of SLO and a bar."""
    key = _key(plan)
    # The verdict first, as in every format: a reader should not scroll past the tables.
    word = plan.verdict_words().upper()
    color = "green" if plan.fits else "yellow" if plan.not_checked or plan.fits is None else "red"
    console.print(f"verdict: [{color}]{word}[/{color}]{_why(plan)}", highlight=False)
    console.print(
        f"[bold]{plan.service}[/bold] ({_environment(plan)}) "
        f"headroom {fmt.share(plan.headroom, 0)}, overhead {_ms(plan.overhead_ms)} ms"
    )
    table = Table(show_edge=False, header_style="bold")
    table.add_column("stage", no_wrap=True)
    for p in PERCENTILES:
        table.add_column(f"{p} ms", justify="right")
    table.add_column(share_head(plan, key, short=True), justify="right")
    table.add_column("")
    for s in plan.stages:
        name = ("  ∥ " if s.in_parallel else "") + ("  ↳ " if s.inside else "") + s.name
        if s.source == "llm":
            name += " (llm)"
        share = s.share_of_slo.get(key)
        table.add_row(
            name,
            *(_ms(s.budget.get(p)) for p in PERCENTILES),
            fmt.share(share, 0),
            _bar(share) if share is not None else Text(""),
        )
    table.add_section()
    gate = by_requests(plan)
    add_label = "additive" if gate else "additive ✓gate"
    comp_label = "composed (requests) ✓gate" if gate else "composed (MC)"
    table.add_row(add_label, *(_ms(plan.additive[p]) for p in PERCENTILES), "", "")
    comp = plan.composed
    table.add_row(comp_label, *(_ms(comp.at(p)) for p in PERCENTILES), "", "")
    table.add_row("SLO", *(_ms(plan.slo.get(p)) for p in PERCENTILES), "", "", style="bold")
    console.print(table)
    for check in plan.gates.checks:
        line = check_line(plan, check)
        head, verdict = line.rsplit(": ", 1)
        color = {True: "green", False: "red", None: "yellow"}[check.fits]
        console.print(f"{head}: [{color}]{verdict}[/{color}]", highlight=False)
    for row in plan.llm:
        console.print(
            f"llm {row.stage}, from its medians: {_llm_sum(row)} ({row.dominant} dominates)"
        )
    if comp.default_spread_stages:
        console.print(
            f"[dim]single-percentile stages use the default log-space spread sigma="
            f"{comp.default_sigma}: {', '.join(comp.default_spread_stages)}[/dim]"
        )
    if plan.objectives:
        console.print(_objectives_table(plan))
    if plan.goodput is not None:
        console.print(_goodput_line(plan), markup=False)
    for line in class_lines(plan):
        console.print(line, markup=False, highlight=False)
    for pr in plan.problems:
        color = "red" if pr.severity == "error" else "yellow"
        label = PROBLEM_LABELS.get(pr.severity, pr.severity)
        console.print(f"[{color}]{label}[/{color}]: {pr.message}", highlight=False)


def _why(plan: Plan) -> str:
    """What decided the verdict, in a few words beside it."""
    errors = [p for p in plan.problems if p.severity == "error"]
    if plan.not_checked:
        return ": no gated objective can be estimated from the slices (see below)"
    if errors:
        more = f" (and {fmt.count(len(errors) - 1)} more)" if len(errors) > 1 else ""
        return f": {errors[0].message.split(': ', 1)[0]}{more} (see below)"
    return ""


def _objective_cells(o: ObjectiveCheck) -> list[str]:
    name = f"{o.metric} {o.percentile}"
    if o.output_tokens is not None:
        name += f" at {fmt.count(o.output_tokens)} tokens"
    return [
        name,
        *(fmt.ms(v) for v in (o.target_ms, o.limit_ms, o.additive_ms, o.composed_ms)),
        VERDICT_WORDS[o.verdict] + ("" if o.gated else " (not gated)"),
    ]


_OBJECTIVE_HEAD = ["objective", "target ms", "limit ms", "additive ms", "composed ms", "verdict"]


def _objectives_table(plan: Plan) -> Table:
    table = Table(show_edge=False, header_style="bold", title="objectives")
    for i, head in enumerate(_OBJECTIVE_HEAD):
        table.add_column(head, justify="left" if i in (0, 5) else "right")
    for o in plan.objectives:
        table.add_row(*_objective_cells(o))
    return table


def _objectives_md(plan: Plan) -> list[str]:
    if not plan.objectives:
        return []
    lines = ["## Objectives", "", "| " + " | ".join(_OBJECTIVE_HEAD) + " |"]
    lines.append("|---|---:|---:|---:|---:|---|")
    lines += ["| " + " | ".join(_objective_cells(o)) + " |" for o in plan.objectives]
    return [*lines, ""]


@safe_markdown_renderer
def plan_markdown(plan: Plan) -> str:
    """Render a plan as a markdown document."""
    key = _key(plan)
    lines = [
        f"# Latency budget plan: {plan.service}",
        "",
        f"Verdict: **{plan.verdict_words()}**{_why(plan)}.",
        "",
        f"{_environment(plan).capitalize()}; headroom "
        f"{fmt.share(plan.headroom, 0)}; overhead {_ms(plan.overhead_ms)} ms.",
        "",
        f"| stage | p50 ms | p95 ms | p99 ms | {share_head(plan, key)} |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in plan.stages:
        share = s.share_of_slo.get(key)
        name = ("∥ " if s.in_parallel else "") + ("↳ " if s.inside else "") + s.name
        cells = " | ".join(_ms(s.budget.get(p)) for p in PERCENTILES)
        lines.append(f"| {name} | {cells} | {fmt.share(share, 0)} |")
    comp = plan.composed
    add_label, comp_label, note = row_labels(plan)
    lines += [
        f"| {_bold_gate(add_label)} | {' | '.join(_ms(plan.additive[p]) for p in PERCENTILES)} | |",
        f"| {_bold_gate(comp_label)} | {' | '.join(_ms(comp.at(p)) for p in PERCENTILES)} | |",
        f"| **SLO** | {' | '.join(_ms(plan.slo.get(p)) for p in PERCENTILES)} | |",
        "",
        note,
        "",
    ]
    lines += _objectives_md(plan)
    if plan.goodput is not None:
        lines += [_goodput_line(plan), ""]
    if plan.classes:
        lines += ["## Classes", "", *(f"- {line}" for line in class_lines(plan)), ""]
    if plan.llm:
        lines += ["## LLM stages", ""]
        for row in plan.llm:
            lines.append(
                f"- {row.stage}, from its medians: {_llm_sum(row)}; {row.dominant} dominates"
            )
        lines.append("")
    lines += ["## Problems", ""]
    lines += [
        f"- **{PROBLEM_LABELS.get(p.severity, p.severity)}**: {p.message}" for p in plan.problems
    ] or ["- none"]
    return "\n".join(lines) + "\n"


def _ttft(row: LlmSlice, unit: str) -> str:
    return "" if row.ttft_stage is not None else f"TTFT {_ms(row.ttft_ms)}{unit} + "


def _llm_sum(row: LlmSlice) -> str:
    return (
        f"{_ttft(row, ' ms')}decode {_ms(row.decode_ms)} ms ({fmt.count(row.output_tokens)} "
        f"tokens at {fmt.number(row.tokens_per_s)} tok/s) + tail {_ms(row.tail_ms)} ms "
        f"= {_ms(row.total_ms)} ms{_held(row)}"
    )


def _held(row: LlmSlice) -> str:
    # The call's TTFT is a stage of its own: shown once, not added to this stage again.
    if row.ttft_stage is None:
        return ""
    return f"; its TTFT (median {_ms(row.ttft_ms)} ms) is the {row.ttft_stage} stage"


def _goodput_line(plan: Plan) -> str:
    g = plan.goodput
    assert g is not None
    within = ", ".join(f"{k} {_ms(v)} ms" for k, v in g.thresholds.items())
    if g.min is None:
        verdict = "reported"
    else:
        verdict = {True: "fits", False: "below the minimum", None: "may not fit"}[g.fits]
    least = f" (minimum {fmt.share(g.min)})" if g.min is not None else ""
    low = "at most " if g.left_out else ""
    shares = (
        fmt.share(g.share)
        if fmt.share(g.share) == fmt.share(g.share_high)
        else f"{fmt.share(g.share)} to {fmt.share(g.share_high)}"
    )
    return (
        f"goodput: {low}{shares} of requests "
        f"expected to meet {within}{least}: {verdict} [{g.method}]"
    )


def class_lines(plan: Plan) -> list[str]:
    """One line per class: its stages, each objective's composed figure and verdict."""
    out = []
    for c in plan.classes or []:
        skip = f"; skips {', '.join(c.skip)}" if c.skip else ""
        said = "; ".join(
            f"{o.metric} {o.percentile} {_ms(o.composed_ms)} ms composed vs "
            f"{_ms(o.target_ms)} ms: {o.verdict.replace('_', ' ')}"
            for o in c.objectives
        )
        verdict = "fits" if c.fits else "does not fit"
        out.append(
            f"class {c.name} (priority {c.priority}{skip}): {verdict}: {said or 'no objective'}"
        )
    return out
