"""The replay report (a policy run over a recorded log) as one self-contained HTML page."""

from __future__ import annotations

from tailbudget import _fmt as fmt
from tailbudget.control.replay_record import ReplayPolicy, ReplayReport
from tailbudget.report.html import page, takeaways
from tailbudget.report.html.class_sections import replay_classes_html
from tailbudget.report.html.page import Cell, cell, esc, figure, kv, not_available, table
from tailbudget.report.html.timelines import replay_chart
from tailbudget.report.replay_text import verdict_line


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _summary_pairs(rep: ReplayReport) -> list[tuple[str, str]]:
    rows = rep.rows
    pairs = [("source", rep.source), ("format", rep.format)]
    if rep.service:
        pairs.append(("service", rep.service))
    pairs += [
        (
            "rows",
            f"{fmt.count(rows.used)} used of {fmt.count(rows.total)} read, "
            f"{fmt.count(rows.rejected)} rejected",
        ),
        *((f"rejected: {k}", fmt.count(v)) for k, v in rows.rejected_reasons.items()),
        ("start", rep.start),
        ("end", rep.end),
        ("duration", fmt.seconds(rep.duration_s)),
        ("window", fmt.seconds(rep.window_s)),
        ("evaluate every", fmt.seconds(rep.evaluate_every_s)),
        ("evaluations", fmt.count(rep.evaluations)),
    ]
    if rep.baseline_p99_ms is not None:
        pairs.append(("baseline p99", f"{fmt.ms(rep.baseline_p99_ms)} ms"))
    if rep.baseline_source:
        pairs.append(("baseline source", rep.baseline_source))
    pairs += [(f"baseline {m}", fmt.threshold(m, v)) for m, v in rep.baselines.items()]
    pairs += [
        ("dry run", _yes(rep.dry_run)),
        ("loop", rep.loop),
        ("final replicas", fmt.count(rep.final_replicas)),
        ("active at end", ", ".join(rep.active_at_end) or "none"),
        ("summary", ", ".join(f"{k} x{fmt.count(n)}" for k, n in rep.summary.items()) or "none"),
    ]
    if rep.timeline:
        pairs.append(
            (
                "windows evaluated",
                f"{fmt.count(len(rep.timeline))} "
                f"({fmt.count(rep.known_windows)} with enough samples)",
            )
        )
    return pairs


def _verdict(rep: ReplayReport) -> str:
    # Open loop is the one caveat every reader needs before the decisions: said with the
    # verdict, since no decision changed the latencies that follow it.
    loop = "".join(f'<p class="rec" id="open-loop">{esc(n)}</p>' for n in rep.open_loop)
    return f'<p class="verdict"><strong>{esc(verdict_line(rep))}.</strong></p>' + loop


def _summary(rep: ReplayReport) -> str:
    items = "".join(f"<li>{esc(n)}</li>" for n in rep.other_notes)
    return kv(_summary_pairs(rep)) + (f"<ul>{items}</ul>" if items else "")


def _policy_pairs(pol: ReplayPolicy) -> list[tuple[str, str]]:
    r = pol.replicas
    pairs = [
        ("source", pol.source),
        ("window", fmt.seconds(pol.window_s)),
        ("evaluate every", fmt.seconds(pol.evaluate_every_s)),
        ("min samples", fmt.count(pol.min_samples)),
        ("confidence", fmt.number(pol.confidence)),
        ("dry run", _yes(pol.dry_run)),
    ]
    if pol.baseline_p99_ms is not None:
        pairs.append(("baseline p99", f"{fmt.ms(pol.baseline_p99_ms)} ms"))
    pairs.append(
        ("replicas", f"min {fmt.count(r.min)}, max {fmt.count(r.max)}, step {fmt.count(r.step)}")
    )
    return pairs


def _policy(rep: ReplayReport) -> str:
    pol = rep.policy
    if not pol.rules:
        return not_available("the policy has no rules")
    return kv(_policy_pairs(pol)) + table(
        ["rule", "metric", "op", "threshold", "for (s)", "action", "cooldown (s)", "clear below"],
        [
            [
                cell(r.name),
                cell(r.metric),
                cell(r.op),
                _threshold(r.metric, r.threshold),
                cell(r.for_s, "num"),
                cell(r.action),
                cell(r.cooldown_s, "num"),
                _threshold(r.metric, r.clear_threshold),
            ]
            for r in pol.rules
        ],
        numeric=[3, 4, 6, 7],
    )


def _threshold(metric: str, value: float | None) -> Cell:
    """A threshold in its metric's unit (0.005 of error rate reads 0.5%, not 0.01)."""
    if value is None:
        return cell(None)
    return Cell(fmt.threshold(metric, value), value, "num")


def _timeline(rep: ReplayReport) -> str:
    if not rep.timeline:
        return (
            f'<p class="takeaway"><strong>{esc(takeaways.replay(rep))}</strong></p>'
            + not_available("the replay has no window timeline")
        )
    return figure("replay", takeaways.replay(rep), replay_chart(rep), "replay timeline")


def _decisions(rep: ReplayReport) -> str:
    if not rep.decisions:
        return not_available("the policy took no action over this log")
    return table(
        ["time", "offset (s)", "action", "rule", "metric", "value", "threshold", "reason"],
        [
            [
                cell(d.t),
                cell(d.t_offset_s, "num"),
                cell(d.action),
                cell(d.rule or "-"),
                cell(d.metric),
                _threshold(d.metric, d.value),
                _threshold(d.metric, d.threshold),
                cell(d.reason, "long"),
            ]
            for d in rep.decisions
        ],
        numeric=[1, 5, 6],
    )


def _classes(replay: ReplayReport) -> str:
    return replay_classes_html(replay) or ""


def render_replay_html(replay: ReplayReport) -> str:
    """Render a replay as one self-contained HTML page."""
    sections = page.render_sections(
        replay,
        (
            ("verdict", "Verdict", _verdict),
            ("summary", "Replay", _summary),
            ("timeline", "Timeline", _timeline),
            ("decisions", "Decisions", _decisions),
            *((("classes", "Classes", _classes),) if replay.classes is not None else ()),
            ("policy", "Policy", _policy),
        ),
    )
    return page.document(
        f"Policy replay: {replay.name()}",
        "What the controller would have done, window by window",
        sections,
    )
