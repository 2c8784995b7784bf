"""How much work a `simulate` or `capacity` run implies, decided before any of it starts.

A simulation's cost grows with its arrivals, its policy evaluations and the
replica slots it keeps, summed over every run (each policy; each replica count
and load `capacity` tries). The estimate is made from the options and the
log's own figures before anything is allocated, and a run above the bound is
refused with the option that drives it, the estimate and the bound:
`--max-events` raises it. The same bound caps the minutes a fitted log may
span (the fit keeps one entry per minute of it).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tailbudget.errors import TailbudgetError, said
from tailbudget.sim.arrivals import ArrivalSpec, replay_horizon

__all__ = [
    "CAPACITY_RUNS_PER_LOAD",
    "DEFAULT_MAX_EVENTS",
    "TOTAL_FACTOR",
    "Estimate",
    "RunShape",
    "arrivals_per_run",
    "check_estimate",
    "check_span",
    "parse_max_events",
]

DEFAULT_MAX_EVENTS = 4_000_000
"""Events one run may hold: a run keeps about 180 bytes per arrival, so this stays under
1 GB, and takes a minute or two on one core."""
TOTAL_FACTOR = 20
"""All runs of one command together: at most this many times `--max-events`."""

CAPACITY_RUNS_PER_LOAD = 19
"""Doubling up to 512 replicas then bisecting: at most 2 x log2(512) + 1 runs per load."""
CAPACITY_BREACH_RUNS = 12
"""Runs of the scale-before-breach search (two ends and ten bisections)."""
CAPACITY_MAX_REPLICAS = 512

_DEFAULT_POISSON_S = 3600.0
_DEFAULT_BURST_S = 60.0


@dataclass(frozen=True)
class RunShape:
    """What one run holds: arrivals, policy evaluations, replica slots at the peak."""

    arrivals: float
    ticks: float
    slots: float
    steps: float = 0.0
    """Decode steps of an LLM model (each a step of every replica's batch): the arrivals'
    output tokens over the batch limit, at least the longest answer's."""

    @property
    def events(self) -> float:
        """The run's cost in events."""
        return self.arrivals + self.ticks + self.slots + self.steps


@dataclass(frozen=True)
class Estimate:
    """The events a whole command implies and the option each part comes from."""

    runs: int
    shape: RunShape
    """The largest single run."""
    total: float
    blame: dict[str, str]
    """arrivals | ticks | slots -> the option (as written, `errors.said`) that sets it."""
    named: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The arguments each `blame` names (the refusal's `mentions`)."""


def parse_max_events(value: int | None) -> int:
    """`max_events` (None: the default), refused below 1."""
    if value is None:
        return DEFAULT_MAX_EVENTS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TailbudgetError(
            f"max_events must be a whole number >= 1, got {value!r}", param="max_events"
        )
    return value


def arrivals_per_run(
    spec: ArrivalSpec,
    *,
    load: float,
    duration_s: float | None,
    max_requests: int | None,
    recorded: int,
    span_s: float,
) -> tuple[float, float]:
    """Arrivals of one run and its horizon (s), as `make_arrivals` will make them.

    `recorded`/`span_s`: the requests and time span of the recorded times replayed
    (the log's own or a trace's); unused for poisson and burst.
    """
    if spec.kind == "poisson":
        horizon = _DEFAULT_POISSON_S if duration_s is None else duration_s
        n = spec.rate * load * horizon
    elif spec.kind == "burst":
        horizon = _DEFAULT_BURST_S if duration_s is None else duration_s
        n = max(1.0, spec.count * load)
    else:
        fill, horizon = replay_horizon(span_s, load, duration_s)
        reps = max(1.0, math.ceil(fill * load / span_s)) if span_s > 0 else 1.0
        n = recorded * reps
    if max_requests is not None:
        n = min(n, float(max_requests))
    return n, horizon


def check_estimate(est: Estimate, max_events: int, command: str) -> None:
    """Refuse a run whose estimate passes the bound, naming what drives it: each run at
    most `max_events` (what it allocates), all runs together at most TOTAL_FACTOR times
    that (the time it takes)."""
    shape = est.shape
    parts = {"arrivals": shape.arrivals, "ticks": shape.ticks, "slots": shape.slots,
             "steps": shape.steps}  # fmt: skip
    worst = max(parts, key=lambda k: parts[k])
    what = {
        "arrivals": f"{_count(parts['arrivals'])} arrivals",
        "ticks": f"{_count(parts['ticks'])} policy evaluations",
        "slots": f"{_count(parts['slots'])} replica slots",
        "steps": f"{_count(parts['steps'])} decode steps",
    }[worst]
    if not est.shape.events <= max_events:
        raise TailbudgetError(
            f"{est.blame[worst]}: one {command} run would hold about "
            f"{_count(est.shape.events)} simulated events ({what}), above the bound of "
            f"{max_events:,}; lower it, or raise {est.blame['raise']}",
            mentions=(*est.named.get(worst, ()), *est.named.get("raise", ())),
        )
    if not est.total <= TOTAL_FACTOR * max_events:
        raise TailbudgetError(
            f"{est.blame[worst]}: {command} would run about {_count(est.total)} simulated "
            f"events in {est.runs:,} runs (up to {what} a run), above the bound of "
            f"{TOTAL_FACTOR * max_events:,} ({TOTAL_FACTOR} x {est.blame['raise']}); lower "
            f"it, or raise {est.blame['raise']}",
            mentions=(*est.named.get(worst, ()), *est.named.get("raise", ())),
        )


def check_span(source: str, first_s: float, last_s: float, max_events: int) -> None:
    """Refuse a log or trace whose times span more minutes than the bound."""
    span = last_s - first_s
    if not math.isfinite(span) or span / 60.0 > max_events:
        raise TailbudgetError(
            f"{source}: its times span {_span(span)} ({_date(first_s)} to {_date(last_s)}), "
            f"about {_count(span / 60.0)} minutes to fit over, above the bound of "
            f"{max_events:,}; check its timestamps (epoch seconds, ms or ISO-8601), "
            f"or raise {said('max_events')}",
            mentions=("max_events",),
        )


def run_total(shapes: Sequence[RunShape]) -> float:
    """The events of every run together."""
    return math.fsum(s.events for s in shapes)


def _count(x: float) -> str:
    return f"{x:,.0f}" if math.isfinite(x) and x < 1e15 else f"{x:.3g}"


def _span(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "an unbounded time"
    days = seconds / 86_400.0
    return f"{days / 365.25:,.1f} years" if days >= 365.25 else f"{days:,.1f} days"


def _date(epoch_s: float) -> str:

    try:
        return dt.datetime.fromtimestamp(epoch_s, dt.UTC).strftime("%Y-%m-%d")
    except (OverflowError, OSError, ValueError):
        return f"{epoch_s:.6g} s"
