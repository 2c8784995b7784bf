"""The replay for a terminal: a header, one line per decision, the notes."""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget._names import safe_markdown_renderer
from tailbudget.control.replay_record import ReplayObjective, ReplayReport

__all__ = ["replay_markdown", "replay_text", "verdict_line"]


def verdict_line(rep: ReplayReport) -> str:
    """What the policy did over the log, in one sentence: its decisions by action and
    where it left the service (every format opens with it)."""
    if not rep.decisions:
        return f"The policy took no action over {fmt.seconds(rep.duration_s)} of this log"
    by_action = ", ".join(f"{k} x{fmt.count(n)}" for k, n in rep.summary.items())
    active = ", ".join(rep.active_at_end) or "nothing"
    return (
        f"The policy would have made {fmt.count(len(rep.decisions))} "
        f"decision{'s' if len(rep.decisions) != 1 else ''} over {fmt.seconds(rep.duration_s)}"
        f" ({by_action}), ending at {fmt.count(rep.final_replicas)} desired replicas with "
        f"{active} active"
    )


def replay_text(rep: ReplayReport) -> str:
    """The replay for a terminal: the verdict and the open-loop caveat, a header, one line
    per decision, the notes."""
    rows = rep.rows
    lines = [
        f"verdict: {verdict_line(rep)}.",
        *rep.open_loop,
        "",
        f"replay of {rep.source}: {fmt.counted(rows.used, 'request')} over "
        f"{fmt.seconds(rep.duration_s)} ({rep.start} .. {rep.end}), "
        f"{fmt.counted(rep.evaluations, 'evaluation')} every {rep.evaluate_every_s:g} s on a "
        f"{rep.window_s:g} s window",
        f"policy: {rep.policy.source}" + (" (dry run)" if rep.dry_run else ""),
    ]
    if rep.baselines:
        lines.append(
            "baselines: "
            + ", ".join(f"{m} {fmt.threshold(m, v)}" for m, v in rep.baselines.items())
        )
    if rep.objectives:
        lines.append("objectives on the whole log: " + "; ".join(map(_objective, rep.objectives)))
    if rows.rejected:
        reasons = ", ".join(f"{fmt.count(v)} {k}" for k, v in rows.rejected_reasons.items())
        lines.append(f"rejected rows: {fmt.count(rows.rejected)} ({reasons})")
    lines.append("")
    if not rep.decisions:
        lines.append("no decisions: the policy took no action over this log")
    for d in rep.decisions:
        lines.append(
            f"+{fmt.count(d.t_offset_s):>9}s  {d.t}  {d.action:<15} "
            f"{d.metric} {fmt.threshold(d.metric, d.value)} vs "
            f"{fmt.threshold(d.metric, d.threshold)}  [{d.rule}]"
        )
        lines.append(f"{'':13}{d.reason}")
    lines.append("")
    summary = ", ".join(f"{k} x{fmt.count(v)}" for k, v in rep.summary.items()) or "none"
    lines.append(
        f"decisions: {summary}; desired replicas at the end: {fmt.count(rep.final_replicas)}; "
        f"active at the end: {', '.join(rep.active_at_end) or 'none'}"
    )
    lines += class_lines(rep)
    lines.extend(f"note: {n}" for n in rep.other_notes)
    return "\n".join(lines) + "\n"


def class_lines(rep: ReplayReport) -> list[str]:
    """Each class's own decisions, and which class each shed_load sheds."""
    if rep.classes is None:
        return []
    out = ["", f"classes (column {rep.class_by}), each on its own requests with its own rules:"]
    for c in rep.classes:
        said = ", ".join(f"{k} x{fmt.count(v)}" for k, v in c.summary.items()) or "no action"
        out.append(f"  {c.name} (priority {c.priority}, {fmt.count(c.requests)} requests): {said}")
    for step in rep.shedding or []:
        what = step.sheds or "nothing left to shed"
        verb = "sheds" if step.action == "shed_load" else "restores"
        out.append(
            f"  +{fmt.count(step.t_offset_s)}s {step.action} ({step.trigger}'s {step.rule}) "
            f"{verb} {what}"
        )
    return out


@safe_markdown_renderer
def replay_markdown(rep: ReplayReport) -> str:
    """The replay in Markdown: a heading, the verdict and the open-loop caveat (as the HTML
    page opens), then the terminal text's body as a block."""
    caveat = "".join(f"{n}\n\n" for n in rep.open_loop)
    body = replay_text(rep).split("\n\n", 1)[1]  # the verdict is above, not repeated
    return (
        f"# Policy replay: {rep.name()}\n\n**Verdict: {verdict_line(rep)}.**\n\n{caveat}"
        f"```text\n{body}```\n"
    )


def _objective(o: ReplayObjective) -> str:
    """'e2e.p99 2,176 ms against 1,000 ms: breach (5 of 52 over)': the audit's verdict."""
    figure = fmt.MISSING if o.measured_ms is None else f"{fmt.ms(o.measured_ms)} ms"
    over = f" ({fmt.count(o.over)} of {fmt.count(o.n)} over)" if o.over is not None and o.n else ""
    return f"{o.objective} {figure} against {fmt.ms(o.target_ms)} ms: {o.verdict}{over}"
