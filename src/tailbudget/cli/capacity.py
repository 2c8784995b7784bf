"""`tailbudget capacity`: replicas each objective needs at the log's load and multiples of it."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli import _sim
from tailbudget.cli._common import EXIT_GATE, clean_errors
from tailbudget.errors import TailbudgetError


def _loads(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise TailbudgetError(f"--load takes multiples such as 1,2,4, got {text!r}") from None
    if not out or any(not x > 0 for x in out):
        raise TailbudgetError(f"--load takes positive multiples such as 1,2,4, got {text!r}")
    return out


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
) -> None:
    """Fewest replicas meeting every gated objective, per load multiple, with a chart."""
    from tailbudget.sim.arrivals import parse_arrivals
    from tailbudget.sim.bounds import parse_max_events
    from tailbudget.sim.capacity import capacity_curve
    from tailbudget.sim.estimate import Given, check_capacity

    bound = parse_max_events(max_events)
    loads = _loads(load)
    spec = parse_arrivals(arrivals)
    horizon = _sim.horizon(duration)
    inputs = _sim.sim_inputs(
        logs, budget, slo, events=events, cold_window_min=cold_window_min,
        cold_factor=cold_factor, provision_delay=provision_delay, concurrency=concurrency,
        max_events=bound,
    )  # fmt: skip
    if arrivals is None:
        spec = inputs.fitted.own_arrivals()
    given = Given(arrivals, duration, load if load != "1,2,4" else None, None, concurrency)
    check_capacity(
        inputs.fitted, inputs.policy, spec, loads, duration_s=horizon, given=given, max_events=bound
    )
    rep = capacity_curve(
        inputs.fitted.model,
        inputs.objectives,
        arrivals=spec,
        loads=loads,
        duration_s=horizon,
        seed=seed,
        log_times=inputs.fitted.log_times,
    )
    if save_model is not None:
        from tailbudget.sim.model_file import save_model as write_model

        write_model(inputs.fitted.model, save_model)
    _sim.emit_report(rep, format, output)
    if fail_on_breach and any(p.replicas is None for p in rep.curve):
        raise typer.Exit(EXIT_GATE)
