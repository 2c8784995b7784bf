"""`tailbudget simulate`: a model fitted from LOG, run closed loop, policies side by side."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli import _sim
from tailbudget.cli._common import clean_errors
from tailbudget.errors import TailbudgetError


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
) -> None:
    """Fit a service model from LOG and run each policy on the same arrivals."""
    from tailbudget.sim.arrivals import parse_arrivals
    from tailbudget.sim.bounds import parse_max_events
    from tailbudget.sim.estimate import Given, check_simulate
    from tailbudget.sim.policies import parse_policy_spec
    from tailbudget.sim.run import simulate

    if replicas is not None and replicas < 1:
        raise TailbudgetError(f"--replicas must be a whole number >= 1, got {replicas}")
    if requests is not None and requests < 1:
        raise TailbudgetError(f"--requests must be a whole number >= 1, got {requests}")
    if logging_overhead_ms is not None and not logging_overhead_ms >= 0:
        raise TailbudgetError(f"--logging-overhead-ms must be >= 0, got {logging_overhead_ms:g}")
    bound = parse_max_events(max_events)
    specs = [parse_policy_spec(p) for p in (policy or ["budget", "fixed"])]
    spec = parse_arrivals(arrivals)
    horizon = _sim.horizon(duration)
    inputs = _sim.sim_inputs(
        logs, budget, slo, events=events, cold_window_min=cold_window_min,
        cold_factor=cold_factor, provision_delay=provision_delay, concurrency=concurrency,
        extra={"logging_overhead_ms": logging_overhead_ms}, max_events=bound,
    )  # fmt: skip
    if arrivals is None:
        spec = inputs.fitted.own_arrivals()
    start = replicas or max(1, inputs.policy.replicas.min)
    given = Given(
        arrivals, duration, None if load == 1 else f"{load:g}", replicas, concurrency,
        tuple(policy), requests,
    )  # fmt: skip
    check_simulate(
        inputs.fitted, inputs.policy, spec, specs, start=start, load=load, duration_s=horizon,
        given=given, max_events=bound,
    )  # fmt: skip
    rep = simulate(
        inputs.fitted.model,
        inputs.objectives,
        arrivals=spec,
        policies=specs,
        budget_policy=inputs.policy,
        replicas=start,
        duration_s=horizon,
        load=load,
        max_requests=requests,
        seed=seed,
        log_times=inputs.fitted.log_times,
        signal=inputs.signal,
        headroom=0.0 if inputs.budget is None else inputs.budget.headroom,
    )
    if save_model is not None:
        from tailbudget.sim.model_file import save_model as write_model

        write_model(inputs.fitted.model, save_model)
    _sim.emit_report(rep, format, output)
