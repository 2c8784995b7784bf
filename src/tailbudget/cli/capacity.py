"""`tailbudget capacity`: replicas each objective needs at the log's load and multiples of it."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli import _sim
from tailbudget.cli._common import clean_errors, gate_failed


@clean_errors
def capacity_command(
    logs: list[str] = _sim.LOGS,
    budget: Path | None = _sim.BUDGET,
    slo: str | None = _sim.SLO,
    load: str = typer.Option("1,2,4", "--load", help="Multiples of the log's load."),
    arrivals: str | None = typer.Option(
        None, "--arrivals", help="poisson:RATE, burst:N or a CSV of times (default: LOG's)."
    ),
    duration: str | None = typer.Option(None, "--duration", help="Simulated time per run."),
    concurrency: int | None = _sim.CONC,
    prefix_hit_rate: float | None = _sim.HITS,
    prefix_cache_blocks: int | None = _sim.CACHE_BLOCKS,
    events: Path | None = _sim.EVENTS,
    cold_window_min: float | None = _sim.COLD_MIN,
    cold_factor: float | None = _sim.COLD,
    provision_delay: str | None = _sim.DELAY,
    seed: int = _sim.SEED,
    max_events: int | None = _sim.MAX_EVENTS,
    format: _sim.SimFormat = typer.Option(_sim.SimFormat.md, "--format", "-f", help="Output."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
    save_model: Path | None = _sim.SAVE_MODEL,
    fail_on_breach: bool = typer.Option(
        False, "--fail-on-breach", help="Exit 1 when some load cannot be met."
    ),
    unit: str | None = _sim.UNIT,
    class_by: str | None = _sim.CLASS_BY,
    class_mix: str | None = _sim.CLASS_MIX,
) -> None:
    """Fewest replicas meeting every gated objective, per load multiple, with a chart."""
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget._api.sim import capacity
    from tailbudget.cli._unit_gate import unit_for_gate

    if fail_on_breach:
        unit_for_gate("--fail-on-breach", logs, unit, budget)
    rep = capacity(
        logs, slo, budget=budget, load=load, arrivals=arrivals, duration=duration,
        concurrency=concurrency, prefix_hit_rate=prefix_hit_rate,
        prefix_cache_blocks=prefix_cache_blocks, events=events,
        cold_window_min=cold_window_min,
        cold_factor=cold_factor, provision_delay=provision_delay, seed=seed,
        save_model=save_model, max_events=max_events, unit=unit,
        class_by=class_by, class_mix=class_mix,
    )  # fmt: skip
    _sim.emit_report(rep, format, output)
    unmet = [f"{p.load:g}x" for p in rep.curve if p.replicas is None]
    if fail_on_breach and unmet:
        raise gate_failed(
            f"--fail-on-breach: no replica count meets the objectives at {', '.join(unmet)} "
            "the log's load"
        )
