"""`tailbudget replay`: run the live policy over a recorded log and list every decision."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tailbudget.cli._common import clean_errors, emit

if TYPE_CHECKING:
    pass


class ReplayFormat(StrEnum):
    """Output formats of `replay`."""

    json = "json"
    text = "text"
    md = "md"
    html = "html"


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
        ReplayFormat.text, "--format", "-f", help="Output: text (default), md, json or html."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
    total: str | None = typer.Option(None, "--total", help="Total latency column."),
    timestamp: str | None = typer.Option(None, "--timestamp", help="Timestamp column."),
    error: str | None = typer.Option(None, "--error", help="Error flag column."),
    unit: str | None = typer.Option(None, "--unit", help="Unit of the total: ms, s or us."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Mark decisions as dry run."),
    class_by: str | None = typer.Option(
        None,
        "--class-by",
        help="Column of each request's class (default: the budget's classes.by).",
    ),
    events: Path | None = typer.Option(
        None, "--events", help="CSV of timestamp,event: rollbacks after a scale_up are cold."
    ),
    cold_window_min: float = typer.Option(
        5.0, "--cold-window-min", help="Minutes after a scale_up that count as cold."
    ),
) -> None:
    """Replay the policy over LOG in time order and emit every decision it would take."""
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget._api.replay import replay

    rep = replay(
        log, budget, baseline_window=baseline_window, baseline_p99=baseline_p99,
        baseline=baseline, total=total, timestamp=timestamp, error=error, unit=unit,
        dry_run=dry_run, events=events, cold_window_min=cold_window_min, class_by=class_by,
    )  # fmt: skip
    render = {"json": rep.to_json, "html": rep.to_html, "text": rep.to_text, "md": rep.to_markdown}
    emit(render[format.value](), output)
