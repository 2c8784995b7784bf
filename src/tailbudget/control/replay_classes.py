"""Replay per class: each listed class's rules on its own requests, and shedding by priority.

Every class of the budget's `classes:` block runs the same Controller, with the policy its
own objectives give (the class's view of the budget), over its own requests in time
order. A `shed_load` from any rule (the service's or a class's) sheds the class with the
highest priority number not yet shed (batch before standard before premium); its
`stop_shedding` restores that class. The replay is open loop: it says which class would
be shed, not what shedding it would change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from tailbudget.control.class_shedding import SERVICE, ClassPolicy, ShedOrder
from tailbudget.control.engine import Controller
from tailbudget.control.logsource import ReplayLog
from tailbudget.control.replay_record import ReplayClass, ReplayDecision, ShedStep

__all__ = ["ClassPolicy", "replay_classes", "shed_steps"]


Walker = Callable[[Controller, ReplayLog], tuple[list[ReplayDecision], Counter[str]]]
"""Replay's own walk over a log: the decisions listed and the count per action."""


def replay_classes(
    log: ReplayLog, classes: Sequence[ClassPolicy], walk: Walker
) -> list[ReplayClass]:
    """Each class's own replay, by replay's own walk over the class's requests."""
    assert log.labels is not None
    out = []
    for c in classes:
        mask = np.asarray(log.labels == c.name, dtype=bool)
        decisions: list[ReplayDecision] = []
        summary: Counter[str] = Counter()
        if mask.any():
            decisions, summary = walk(Controller(c.policy), log.subset(mask))
        out.append(
            ReplayClass(
                name=c.name,
                priority=c.priority,
                requests=int(mask.sum()),
                summary=dict(sorted(summary.items())),
                decisions=decisions,
                rules=[
                    f"{r.name}: {r.metric} {r.op} {r.threshold:g} -> {r.action}"
                    for r in c.policy.rules
                ],
            )
        )
    return out


def shed_steps(
    service: Sequence[ReplayDecision], classes: Sequence[ReplayClass], order: Sequence[str]
) -> list[ShedStep]:
    """Every shed_load and stop_shedding in time order, with the class each sheds: the
    next in `order` (highest priority number first) not already shed (`ShedOrder`, as
    serve sheds live)."""
    events = [(d, SERVICE) for d in service]
    events += [(d, c.name) for c in classes for d in c.decisions]
    events.sort(key=lambda e: (e[0].t_offset_s, e[1]))
    shed = ShedOrder(order)
    out: list[ShedStep] = []
    for d, trigger in events:
        if d.action not in ("shed_load", "stop_shedding"):
            continue
        target = shed.step(d.action, trigger)
        out.append(
            ShedStep(
                t=d.t,
                t_offset_s=d.t_offset_s,
                action="shed_load" if d.action == "shed_load" else "stop_shedding",
                sheds=target,
                trigger=trigger,
                rule=d.rule,
            )
        )
    return out
