"""`tailbudget replay`: run the live policy over a recorded log and list every decision."""

from __future__ import annotations

import math
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tailbudget._units import parse_duration_s
from tailbudget.cli._common import clean_errors, emit
from tailbudget.errors import PolicyError, TailbudgetError

if TYPE_CHECKING:
    from tailbudget.control.replay_record import ReplayReport


class ReplayFormat(StrEnum):
    """Output formats of `replay`."""

    json = "json"
    text = "text"
    html = "html"


def replay_text(rep: ReplayReport) -> str:
    """The replay for a terminal: a header, one line per decision, the notes."""
    from tailbudget.report import fmt

    rows = rep.rows
    lines = [
        f"replay of {rep.source}: {fmt.count(rows.used)} requests over "
        f"{fmt.count(rep.duration_s)} s ({rep.start} .. {rep.end}), "
        f"{fmt.count(rep.evaluations)} evaluations every {rep.evaluate_every_s:g} s on a "
        f"{rep.window_s:g} s window",
        f"policy: {rep.policy.source}" + (" (dry run)" if rep.dry_run else ""),
        *rep.open_loop,
    ]
    if rep.baselines:
        lines.append(
            "baselines: "
            + ", ".join(f"{m} {fmt.threshold(m, v)}" for m, v in rep.baselines.items())
        )
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
    lines.extend(f"note: {n}" for n in rep.other_notes)
    return "\n".join(lines) + "\n"


def _html(rep: ReplayReport) -> str:
    try:
        from tailbudget.report.html import render_replay_html
    except ImportError:
        raise TailbudgetError(
            "HTML replay reports need tailbudget.report.html, which this build lacks; "
            "use --format json or --format text"
        ) from None
    return render_replay_html(rep)


@clean_errors
def replay_command(
    log: str = typer.Argument(..., help="Per-request log: Parquet, CSV or JSONL (with time)."),
    budget: Path | None = typer.Option(None, "--budget", "-b", help="Budget file with a policy."),
    baseline_window: str | None = typer.Option(
        None, "--baseline-window", help="Baseline p99 = the log's first DURATION (e.g. 10m)."
    ),
    baseline_p99: float | None = typer.Option(None, "--baseline-p99", help="Baseline p99 in ms."),
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        help="Baseline log: its p99 and every metric a rule compares with a baseline.",
    ),
    format: ReplayFormat = typer.Option(
        ReplayFormat.text, "--format", "-f", help="Output: text (default), json or html."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
    total: str | None = typer.Option(None, "--total", help="Total latency column."),
    timestamp: str | None = typer.Option(None, "--timestamp", help="Timestamp column."),
    error: str | None = typer.Option(None, "--error", help="Error flag column."),
    unit: str | None = typer.Option(None, "--unit", help="Unit of the total: ms, s or us."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Mark decisions as dry run."),
    events: Path | None = typer.Option(
        None, "--events", help="CSV of timestamp,event: rollbacks after a scale_up are cold."
    ),
    cold_window_min: float = typer.Option(
        5.0, "--cold-window-min", help="Minutes after a scale_up that count as cold."
    ),
) -> None:
    """Replay the policy over LOG in time order and emit every decision it would take."""
    given = [
        n
        for n, v in (
            ("--baseline-window", baseline_window),
            ("--baseline-p99", baseline_p99),
            ("--baseline", baseline),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise PolicyError(f"give one baseline, not {' and '.join(given)}")
    from tailbudget.budget import load_budget
    from tailbudget.budget.policy import resolve_policy
    from tailbudget.control.logsource import load_replay_log
    from tailbudget.control.replay import Baseline, log_baseline, replay, window_baseline
    from tailbudget.control.replay_record import ReplayReport

    b = load_budget(budget) if budget is not None else None
    policy = resolve_policy(b)
    if dry_run:
        policy = policy.model_copy(update={"dry_run": True})
    if b is not None:
        total = total or b.log.total
        timestamp = timestamp or b.log.timestamp
        error = error or b.log.error
    data = load_replay_log(log, timestamp=timestamp, total=total, error=error, unit=unit)
    base: Baseline | None = None
    if baseline_p99 is not None:
        if not (math.isfinite(baseline_p99) and 0 < baseline_p99 < 1e9):
            raise PolicyError(
                f"--baseline-p99 must be a positive, finite number of ms (below 1e9), "
                f"got {baseline_p99:g}"
            )
        base = Baseline(float(baseline_p99), "--baseline-p99")
    elif baseline_window is not None:
        base = window_baseline(data, parse_duration_s(baseline_window, field="--baseline-window"))
    elif baseline is not None:
        other = load_replay_log(baseline, timestamp=timestamp, total=total, unit=unit)
        base = log_baseline(other, policy, baseline)
    from tailbudget.audit.events import read_events

    rep = replay(
        data,
        policy,
        baseline=base,
        service=b.service if b else None,
        events=read_events(events) if events is not None else (),
        cold_window_s=cold_window_min * 60.0,
    )
    if format is ReplayFormat.json:
        from tailbudget._json import dumps

        emit(dumps(rep, explain=True), output)
    elif format is ReplayFormat.html:
        emit(_html(ReplayReport.of(rep)), output)
    else:
        emit(replay_text(ReplayReport.of(rep)), output)
