"""`tailbudget simulate`: a model fitted from LOG, run closed loop, policies side by side."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli import _sim
from tailbudget.cli._common import clean_errors


@clean_errors
def simulate_command(
    logs: list[str] = _sim.LOGS,
    budget: Path | None = _sim.BUDGET,
    slo: str | None = _sim.SLO,
    arrivals: str | None = typer.Option(
        None, "--arrivals", help="poisson:RATE, burst:N or a CSV of arrival times (default: LOG's)."
    ),
    duration: str | None = typer.Option(None, "--duration", help="Simulated time, e.g. 1h."),
    replicas: int | None = typer.Option(None, "--replicas", help="Starting replicas."),
    concurrency: int | None = _sim.CONC,
    prefix_hit_rate: float | None = _sim.HITS,
    prefix_cache_blocks: int | None = _sim.CACHE_BLOCKS,
    policy: list[str] = typer.Option(
        [], "--policy", help="budget, model, fixed, fixed:N, hpa:concurrency=X, hpa:utilization=U."
    ),
    load: float = typer.Option(1.0, "--load", help="Multiply the arrival rate by this."),
    requests: int | None = typer.Option(None, "--requests", help="At most this many requests."),
    events: Path | None = _sim.EVENTS,
    cold_window_min: float | None = _sim.COLD_MIN,
    cold_factor: float | None = _sim.COLD,
    provision_delay: str | None = _sim.DELAY,
    logging_overhead_ms: float | None = typer.Option(
        None, "--logging-overhead-ms", help="Per-request time trim_logging saves."
    ),
    seed: int = _sim.SEED,
    max_events: int | None = _sim.MAX_EVENTS,
    format: _sim.SimFormat = typer.Option(_sim.SimFormat.md, "--format", "-f", help="Output."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
    save_model: Path | None = _sim.SAVE_MODEL,
    unit: str | None = _sim.UNIT,
    class_by: str | None = _sim.CLASS_BY,
    class_mix: str | None = _sim.CLASS_MIX,
) -> None:
    """Fit a service model from LOG and run each policy on the same arrivals."""
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget._api.sim import simulate

    rep = simulate(
        logs, slo, budget=budget, arrivals=arrivals, duration=duration, replicas=replicas,
        concurrency=concurrency, prefix_hit_rate=prefix_hit_rate,
        prefix_cache_blocks=prefix_cache_blocks, policy=policy, load=load,
        requests=requests,
        events=events, cold_window_min=cold_window_min, cold_factor=cold_factor,
        provision_delay=provision_delay, logging_overhead_ms=logging_overhead_ms,
        seed=seed, save_model=save_model, max_events=max_events, unit=unit,
        class_by=class_by, class_mix=class_mix,
    )  # fmt: skip
    _sim.emit_report(rep, format, output)
