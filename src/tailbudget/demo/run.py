"""`tailbudget demo` as a list of steps over one shared state, so more steps (replay, HTML)
slot in by appending to STEPS."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailbudget import _fmt as fmt
from tailbudget.audit import AuditConfig, AuditReport, run_audit
from tailbudget.audit.events import read_events
from tailbudget.budget import Budget, Plan, load_budget, make_plan
from tailbudget.budget.policy import resolve_policy
from tailbudget.control.logsource import load_replay_log
from tailbudget.control.replay import replay, window_baseline
from tailbudget.control.replay_record import ReplayReport
from tailbudget.demo.generate import BUDGET_YAML, DemoLog, generate
from tailbudget.errors import PolicyError
from tailbudget.logs import ReadOptions, read_log
from tailbudget.report import sim_verdict
from tailbudget.report.audit_md import audit_markdown
from tailbudget.report.audit_view import summary_lines
from tailbudget.report.simulate_md import simulate_markdown
from tailbudget.sim.fit import ModelOptions, read_event_times
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.policies import parse_policy_spec
from tailbudget.sim.run import RunResult, simulate


@dataclass
class DemoState:
    """What the steps share: inputs, intermediate results, files written, summary lines."""

    out_dir: Path
    rows: int = 300_000
    seed: int = 7
    data: DemoLog | None = None
    budget_path: Path | None = None
    budget: Budget | None = None
    plan: Plan | None = None
    report: AuditReport | None = None
    files: list[Path] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    """Room for later steps (replay decisions, ...)."""


Step = Callable[[DemoState], None]


def step_generate(state: DemoState) -> None:
    """Write the RAG log and its scale-up events."""
    state.data = generate(state.out_dir, rows=state.rows, seed=state.seed)
    state.files += [state.data.log, state.data.events]
    state.summary.append(
        f"log: {state.data.rows:,} requests over 4 h, {len(state.data.event_times)} scale-ups"
    )


def step_budget(state: DemoState) -> None:
    """Write and load the service's budget file."""
    path = state.out_dir / "budget.yaml"
    path.write_text(BUDGET_YAML, encoding="utf-8")
    state.budget_path = path
    state.budget = load_budget(path)
    state.files.append(path)


def step_plan(state: DemoState) -> None:
    """Check the slices fit the SLO."""
    assert state.budget is not None
    # A start-up guard: rich loads on first use, not with this module.
    from tailbudget.report.plan import plan_markdown

    state.plan = make_plan(state.budget, seed=state.seed)
    path = state.out_dir / "plan.md"
    path.write_text(plan_markdown(state.plan), encoding="utf-8")
    state.files.append(path)
    fits = {True: "fit", False: "do NOT fit", None: "are inconclusive against"}[state.plan.fits]
    # The plan is the budget on paper; the audit next measures the log against it.
    state.summary.append(
        f"plan: the stage budgets {fits} the SLO with headroom, on paper (the audit below "
        "measures the log against them)"
    )


def step_audit(state: DemoState) -> None:
    """Audit the log on DuckDB against the budget; write report.md and report.json."""
    assert state.budget is not None and state.data is not None

    log = read_log(str(state.data.log), ReadOptions.from_budget(state.budget))
    config = AuditConfig.from_budget(state.budget, events=read_events(state.data.events))
    state.report = run_audit(log, config)
    md = state.out_dir / "report.md"
    md.write_text(audit_markdown(state.report), encoding="utf-8")
    js = state.out_dir / "report.json"
    js.write_text(state.report.to_json(), encoding="utf-8")
    state.files += [md, js]
    r = state.report
    state.summary += summary_lines(r)


def step_replay(state: DemoState) -> None:
    """Replay the budget's policy over the log; write replay.json."""
    assert state.budget is not None and state.data is not None

    mapping = state.budget.log
    log = load_replay_log(
        state.data.log, timestamp=mapping.timestamp, total=mapping.total, error=mapping.error
    )
    try:
        baseline = window_baseline(log, 600.0)  # the first 10 minutes, as `--baseline-window 10m`
    except PolicyError:
        baseline = None  # too few requests for a p99: the rollback-vs-baseline rule stays off
    rep = replay(
        log,
        resolve_policy(state.budget),
        baseline=baseline,
        service=state.budget.service,
        events=read_events(state.data.events),  # the audit's events: cold windows stay its
    )
    path = state.out_dir / "replay.json"
    path.write_text(rep.to_json(), encoding="utf-8")
    state.files.append(path)
    state.extra["replay"] = rep
    counts = ", ".join(f"{k} x{v}" for k, v in rep.summary.items()) or "no action"
    cold = sum(d.cold_window is not None for d in rep.decisions)
    where = f"; {cold} rollbacks in a scale-up's cold window: cold starts" if cold else ""
    state.summary.append(f"replay: {len(rep.decisions)} decisions ({counts}{where})")


SIM_POLICIES = ("model", "budget", "hpa:concurrency=8", "fixed:2")
"""The policies the demo's simulation runs side by side (the floor is always beside them)."""
SIM_CONCURRENCY = 8


def step_simulate(state: DemoState) -> None:
    """Fit the service model from the log and run the policies closed loop; simulate.md."""
    assert state.budget is not None and state.data is not None

    budget = state.budget
    fitted = fit_logs(
        [str(state.data.log)],
        ReadOptions.from_budget(budget),
        # the log cannot show how many requests one replica serves at once; the demo states 8
        ModelOptions(concurrency=SIM_CONCURRENCY, events_s=read_event_times(state.data.events)),
    )
    policy = resolve_policy(budget)
    rep = simulate(
        fitted.model, budget.objectives, arrivals=fitted.own_arrivals(),
        policies=[parse_policy_spec(p) for p in SIM_POLICIES], budget_policy=policy,
        replicas=max(1, policy.replicas.min), duration_s=3600.0, seed=state.seed,
        log_times=fitted.log_times, headroom=budget.headroom,
    )  # fmt: skip
    path = state.out_dir / "simulate.md"
    path.write_text(simulate_markdown(rep), encoding="utf-8")
    state.files.append(path)
    state.extra["simulate"] = rep
    unmet = 0 if rep.floor is None else rep.floor.unmet_minutes
    # a ratio to a floor that no count meets in some minutes is no yardstick: say so, and
    # quote replica-hours and minutes in breach instead
    runs = "; ".join(
        f"{r.policy} {r.replica_hours:.1f} replica-hours"
        + ("" if unmet else f" ({sim_verdict.vs_floor(rep, r)} the floor)")
        + f", {_minutes(r)}"
        for r in rep.runs
    )
    floor = 0.0 if rep.floor is None else rep.floor.replica_hours
    minutes = 0 if rep.floor is None else len(rep.floor.per_minute)
    head = (
        f"the hindsight floor is not met: no replica count meets the objectives in {unmet} of "
        f"{fmt.counted(minutes, 'minute')}, so no ratio to its {floor:.1f} replica-hours"
        if unmet
        else f"the hindsight floor {floor:.1f} replica-hours"
    )
    every = all(any(o.verdict == "breach" for o in r.objectives) for r in rep.runs)
    why = f"; no policy meets every objective: {sim_verdict.why_none(rep)}" if every else ""
    state.summary.append(f"simulate (the log's first hour; {head}): {runs}{why}")


def _minutes(r: RunResult) -> str:
    """'48 min in breach, 5 inconclusive' (the gated objectives' most)."""
    gated = [o for o in r.objectives if o.objective.gated] or r.objectives
    breach = max((o.minutes_in_breach for o in gated), default=0)
    unsure = max((o.minutes_inconclusive for o in gated), default=0)
    return f"{breach} min in breach" + (f", {unsure} inconclusive" if unsure else "")


def step_html(state: DemoState) -> None:
    """Write report.html (and replay.html after a replay step): self-contained pages with charts."""
    assert state.report is not None
    # A start-up guard: matplotlib loads on first use, not with this module.
    from tailbudget.report.html import render_audit_html, render_replay_html

    path = state.out_dir / "report.html"
    path.write_text(render_audit_html(state.report), encoding="utf-8")
    state.files.append(path)
    state.extra["report_html"] = path
    replay = state.extra.get("replay")
    if isinstance(replay, ReplayReport):
        rpath = state.out_dir / "replay.html"
        rpath.write_text(render_replay_html(replay), encoding="utf-8")
        state.files.append(rpath)
        state.extra["replay_html"] = rpath
    sim = state.extra.get("simulate")
    if sim is not None:
        # A start-up guard: matplotlib loads on first use, not with this module.
        from tailbudget.report.html.simulate import render_simulate_html

        spath = state.out_dir / "simulate.html"
        spath.write_text(render_simulate_html(sim), encoding="utf-8")
        state.files.append(spath)


STEPS: list[Step] = [step_generate, step_budget, step_plan, step_audit]
STEPS.append(step_replay)
STEPS.append(step_simulate)
STEPS.append(step_html)  # last, so it can show whatever the steps before it produced
"""The demo, in order; append a step to extend it."""


def run_demo(
    out_dir: Path,
    *,
    rows: int = 300_000,
    seed: int = 7,
    steps: list[Step] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> DemoState:
    """Run every step into `out_dir` and return the final state."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = DemoState(out_dir=out_dir, rows=rows, seed=seed)
    for step in steps if steps is not None else STEPS:
        if on_step is not None:
            on_step((step.__doc__ or step.__name__).strip().splitlines()[0])
        step(state)
    return state
