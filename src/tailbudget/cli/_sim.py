"""Options shared by `simulate` and `capacity`: reading LOGs, the model's stated values,
the objectives."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tailbudget.cli._common import emit
from tailbudget.errors import TailbudgetError

if TYPE_CHECKING:
    from tailbudget.budget.model import Budget
    from tailbudget.budget.objectives import Objectives
    from tailbudget.budget.policy import Policy
    from tailbudget.sim.capacity import CapacityReport
    from tailbudget.sim.fitting import Fitted
    from tailbudget.sim.run import SimReport


class SimFormat(StrEnum):
    """Output formats of `simulate` and `capacity`."""

    md = "md"
    json = "json"
    html = "html"


def emit_report(rep: SimReport | CapacityReport, format: SimFormat, output: Path | None) -> None:
    """Write a simulation or capacity report in `format` (renderers imported on demand)."""
    from tailbudget.sim.capacity import CapacityReport

    if format is SimFormat.json:
        from tailbudget._json import dumps

        emit(dumps(rep.to_dict(), explain=True), output)
    elif format is SimFormat.html:
        from tailbudget.report.html.simulate import render_capacity_html, render_simulate_html

        page = (
            render_capacity_html(rep)
            if isinstance(rep, CapacityReport)
            else render_simulate_html(rep)
        )
        emit(page, output)
    else:
        from tailbudget.report.simulate_md import capacity_markdown, simulate_markdown

        emit(
            capacity_markdown(rep) if isinstance(rep, CapacityReport) else simulate_markdown(rep),
            output,
        )


@dataclass(frozen=True)
class SimInputs:
    """What both commands start from."""

    fitted: Fitted
    objectives: Objectives
    budget: Budget | None
    policy: Policy
    signal: str
    """What the budget policy's Controller watches: e2e, or ttft (LLM default)."""


LOGS = typer.Argument(
    ..., metavar="LOG...", help="Log(s) of the service; several = one model (a load sweep)."
)
BUDGET = typer.Option(None, "--budget", "-b", help="Budget file (objectives and policy).")
SLO = typer.Option(None, "--slo", help="Objectives, e.g. p95=2800,ttft.p95=500.")
EVENTS = typer.Option(None, "--events", help="CSV of scale-up/deploy times (cold windows).")
COLD_MIN = typer.Option(None, "--cold-window-min", help="Minutes a new replica runs cold.")
COLD = typer.Option(None, "--cold-factor", help="Work multiplier on a cold replica.")
DELAY = typer.Option(None, "--provision-delay", help="Time a new replica takes (e.g. 45s).")
CONC = typer.Option(None, "--concurrency", help="Requests one replica serves at once.")
SEED = typer.Option(0, "--seed", help="Random seed (same seed, same result).")
SAVE_MODEL = typer.Option(
    None, "--save-model", help="Also write the fitted model here (for serve --model)."
)
MAX_EVENTS = typer.Option(
    None,
    "--max-events",
    help="Refuse a run implying more simulated events than this (default 4,000,000 a run).",
)


def horizon(duration: str | None) -> float | None:
    """`--duration` in seconds; zero (or less) is refused, it simulates nothing."""
    from tailbudget._units import parse_duration_s

    if duration is None:
        return None
    seconds = parse_duration_s(duration, field="--duration")
    if not seconds > 0:
        raise TailbudgetError(f"--duration must be a positive time such as 1h, got {duration!r}")
    return seconds


def _policy(budget: Budget | None, objectives: Objectives, llm: bool) -> tuple[Policy, str]:
    """The budget's policy; without one, the default scaled to the e2e p95, or for an LLM
    service judged on TTFT only, the LLM default on ttft.p95."""
    from tailbudget.budget.model import SLO as SLOModel
    from tailbudget.budget.policy import parse_policy, resolve_policy
    from tailbudget.sim.policies import llm_default_policy

    e2e = objectives.e2e()
    ttft = {o.percentile: o.target_ms for o in objectives if o.metric == "ttft"}
    if llm and not e2e and ttft and (budget is None or budget.policy in (None, "default", "model")):
        pol = llm_default_policy(ttft.get("p95", max(ttft.values())))
        if budget is not None and budget.policy == "model":
            pol = pol.model_copy(update={"mode": "model"})
        return pol, "ttft"
    if budget is not None:
        return resolve_policy(budget), "e2e"
    given = {k: v for k, v in e2e.items() if k in ("p50", "p95", "p99")}
    return parse_policy("default", SLOModel(**given) if given else None), "e2e"


def sim_inputs(
    logs: list[str],
    budget_path: Path | None,
    slo: str | None,
    *,
    events: Path | None,
    cold_window_min: float | None,
    cold_factor: float | None,
    provision_delay: str | None,
    concurrency: int | None,
    extra: dict[str, Any] | None = None,
    max_events: int | None = None,
) -> SimInputs:
    """Read and fit; a bad value is a one-line TailbudgetError."""
    from tailbudget._units import parse_duration_s
    from tailbudget.budget import load_budget
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.bounds import SpanError
    from tailbudget.sim.fit import ModelOptions, read_event_times
    from tailbudget.sim.fitting import fit_logs
    from tailbudget.sim.objectives import objectives_for

    if budget_path is not None and slo is not None:
        raise TailbudgetError("give --budget or --slo, not both")
    if concurrency is not None and concurrency < 1:
        raise TailbudgetError(f"--concurrency must be a whole number >= 1, got {concurrency}")
    if cold_factor is not None and not cold_factor >= 1:
        raise TailbudgetError(f"--cold-factor must be >= 1 (a slowdown), got {cold_factor:g}")
    budget = load_budget(budget_path) if budget_path is not None else None
    objectives = objectives_for(budget, slo)
    opts = ModelOptions(
        concurrency=concurrency,
        provision_delay_s=None
        if provision_delay is None
        else parse_duration_s(provision_delay, field="--provision-delay"),
        cold_factor=cold_factor,
        cold_window_s=None if cold_window_min is None else cold_window_min * 60.0,
        events_s=read_event_times(events) if events is not None else (),
        **(extra or {}),
    )
    try:
        fitted = fit_logs(logs, ReadOptions.from_budget(budget), opts, max_events=max_events)
    except SpanError as exc:
        raise exc.in_words("--max-events") from None
    policy, signal = _policy(budget, objectives, fitted.model.kind == "llm")
    return SimInputs(fitted, objectives, budget, policy, signal)
