"""Simulate per class: each drawn request keeps its class from the log, and each listed
class is judged on its own simulated requests by its own objectives (the budget's
`classes:` block, DESIGN.md "Classes").

The class of a simulated request is the class of the logged request it copies
(`WorkSamples.classes`), so class shares follow the log. shed_load drops the arrivals of
the class shed first (the highest priority number), each request by its own class; the
budget policy's class rules shed the next classes in order (sim/class_rules.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from tailbudget.budget.classes import CLASS_NAME, ClassSet
from tailbudget.budget.objectives import Objective, Objectives
from tailbudget.control.class_shedding import ClassPolicy
from tailbudget.errors import TailbudgetError
from tailbudget.sim.objectives import ObjectiveResult, measure
from tailbudget.sim.records import SimClassRecord
from tailbudget.sim.trace import Arrivals, SimTrace

__all__ = [
    "MAX_UNLISTED",
    "ClassResult",
    "SimClasses",
    "class_results",
    "draw_by_class",
    "parse_class_mix",
    "shed_by_class",
]

MAX_UNLISTED = 12
"""Unlisted class values shown on their own, as the audit shows them (audit/classes.py)."""


@dataclass(frozen=True)
class SimClasses:
    """The budget's classes and each logged request's class (what a drawn request keeps)."""

    classes: ClassSet
    labels: npt.NDArray[np.str_]
    """The class of each logged request (indexed like the model's samples)."""
    mix: tuple[tuple[str, float], ...] = ()
    """A stated share per class (`class_mix`): each arrival without a class of its own is
    given one at these shares, then copies a logged request of it (empty: the log's mix)."""
    unlisted: tuple[str, ...] = ()
    """Values of the class column the budget does not list (most requests first, at most
    MAX_UNLISTED): each shown against the service-wide objectives, ungated, as the audit
    shows them."""
    policies: tuple[ClassPolicy, ...] = ()
    """Each listed class's rules (its objectives' policy, as replay and serve resolve it):
    the budget policy runs their shed_load rules on the class's own simulated requests."""

    @classmethod
    def of(cls, classes: ClassSet, labels: npt.NDArray[np.str_]) -> SimClasses:
        """The classes with each logged request's class, and the log's unlisted values."""
        values, counts = np.unique(labels, return_counts=True)
        listed = set(classes.names())
        ranked = sorted(
            ((str(v), int(n)) for v, n in zip(values, counts, strict=True) if str(v) not in listed),
            key=lambda vn: (-vn[1], vn[0]),
        )
        return cls(classes, labels, unlisted=tuple(v for v, _ in ranked[:MAX_UNLISTED]))

    def can_shed(self) -> bool:
        """Shedding goes by class only when the budget lists classes (their priorities)."""
        return bool(self.classes.classes)


@dataclass(frozen=True)
class ClassResult:
    """One class's simulated requests, judged by its objectives."""

    name: str
    requests: int
    objectives: list[ObjectiveResult]
    skipped: tuple[str, ...] = ()
    """Class objectives the simulator cannot measure on this model (e.g. ttft without an
    LLM model), said in the record's note."""
    listed: bool = True
    """False: a value of the class column the budget does not list, judged by the
    service-wide objectives, ungated (it never sets a replica count nor fails a gate)."""

    def record(self) -> SimClassRecord:
        """The JSON contract's class block."""
        gated = [o for o in self.objectives if o.objective.gated]
        return SimClassRecord(
            name=self.name,
            requests=self.requests,
            objectives=[o.record() for o in self.objectives],
            breach_minutes=max((o.minutes_in_breach for o in gated), default=0),
            note=(
                f"not simulated on this model: {', '.join(self.skipped)}" if self.skipped else ""
            ),
            listed=self.listed,
        )


def shed_by_class(arr: Arrivals, sc: SimClasses) -> Arrivals:
    """The arrivals with shed_load's candidates the requests of the class shed first, and
    each arrival's class code (its class's place in the shedding order, 0 unlisted): the
    budget policy's class rules shed the next classes by it (`BudgetPolicy`)."""
    if not sc.can_shed():
        return arr
    order = sc.classes.shed_order()
    labels = sc.labels[arr.src]
    code = np.zeros(arr.size, dtype=np.int64)
    for k, name in enumerate(order, start=1):
        code[labels == name] = k
    return replace(arr, low_priority=code == 1, class_code=code)


def parse_class_mix(given: str | Mapping[str, float] | None) -> tuple[tuple[str, float], ...]:
    """`premium=0.1,standard=0.6,batch=0.3` (or a mapping) -> the shares, in order; each a
    class name with a share in [0, 1], together adding up to 1 (within 0.001)."""
    if given is None:
        return ()
    if isinstance(given, str):
        pairs = [p.partition("=") for p in given.split(",") if p.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise TailbudgetError(
                f"class_mix takes CLASS=SHARE pairs such as premium=0.1,batch=0.9, got {given!r}",
                param="class_mix",
            )
        items: list[tuple[str, object]] = [(k.strip(), v.strip()) for k, _, v in pairs]
    else:
        items = [(str(k), v) for k, v in given.items()]
    out = tuple((name, _share(name, value)) for name, value in items)
    total = sum(v for _, v in out)
    if not out or abs(total - 1.0) > 1e-3:
        raise TailbudgetError(
            f"class_mix: the shares must add up to 1, got {total:g} ({given!r})",
            param="class_mix",
        )
    if len({n for n, _ in out}) < len(out):
        raise TailbudgetError(f"class_mix names a class twice: {given!r}", param="class_mix")
    return out


def _share(name: str, value: object) -> float:
    if not CLASS_NAME.match(name):
        raise TailbudgetError(
            f"class_mix: {name!r} is not a class name (1 to 63 letters, digits, _ . -)",
            param="class_mix",
        )
    try:
        share = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        share = math.nan
    if isinstance(value, bool) or not 0.0 <= share <= 1.0:
        raise TailbudgetError(
            f"class_mix: {name}'s share must be a number from 0 to 1, got {value!r}",
            param="class_mix",
        )
    return share


def _mixed(arr: Arrivals, sc: SimClasses, rng: np.random.Generator) -> Arrivals:
    """Each arrival without a class given one at the stated shares (`class_mix`)."""
    if arr.classes is not None or not sc.mix or not arr.size:
        return arr
    absent = [n for n, v in sc.mix if v > 0 and not (sc.labels == n).any()]
    if absent:
        raise TailbudgetError(
            f"class_mix: class {absent[0]!r} has no request in the log to copy (its "
            f"{sc.classes.by} values: {', '.join(sorted(set(sc.labels.tolist()))[:8])})",
            param="class_mix",
        )
    names = np.asarray([n for n, _ in sc.mix], dtype=np.str_)
    shares = np.asarray([v for _, v in sc.mix], dtype=np.float64)
    return replace(
        arr, classes=names[rng.choice(names.size, size=arr.size, p=shares / shares.sum())]
    )


def draw_by_class(arr: Arrivals, sc: SimClasses, rng: np.random.Generator) -> Arrivals:
    """With a class per arrival (an arrival trace's class column or field, or one drawn at
    the stated `class_mix`): each arrival copies a logged request of its own class; a
    class the log has no request of is refused."""
    arr = _mixed(arr, sc, rng)
    if arr.classes is None:
        return arr
    src = arr.src.copy()
    for name in sorted(set(arr.classes.tolist())):
        pool = np.flatnonzero(sc.labels == name)
        if not pool.size:
            raise TailbudgetError(
                f"arrivals: class {name!r} has no request in the log to copy (its "
                f"{sc.classes.by} values: {', '.join(sorted(set(sc.labels.tolist()))[:8])})",
                param="arrivals",
            )
        mine = arr.classes == name
        src[mine] = pool[rng.integers(0, pool.size, size=int(mine.sum()))]
    return replace(arr, src=src)


def _subset(trace: SimTrace, keep: npt.NDArray[np.bool_]) -> SimTrace:
    return replace(
        trace,
        arrival_s=trace.arrival_s[keep],
        done_s=trace.done_s[keep],
        ttft_s=None if trace.ttft_s is None else trace.ttft_s[keep],
        src=trace.src[keep],
        shed=trace.shed[keep],
        error=trace.error[keep],
        output_tokens=None if trace.output_tokens is None else trace.output_tokens[keep],
    )


def _measured(
    trace: SimTrace, objs: Objectives, stages: Mapping[str, npt.NDArray[np.float64]]
) -> tuple[list[ObjectiveResult], tuple[str, ...]]:
    out: list[ObjectiveResult] = []
    skipped: list[str] = []
    for o in objs:
        if not _simulable(o):
            skipped.append(o.key)
            continue
        try:
            out += measure(trace, [o], stages)
        except TailbudgetError:  # a metric this model does not produce
            skipped.append(o.key)
    return out, tuple(skipped)


def _simulable(o: Objective) -> bool:
    return o.metric != "itl" and o.output_tokens is None


def class_results(
    trace: SimTrace,
    sc: SimClasses,
    service: Objectives,
    stages: Mapping[str, npt.NDArray[np.float64]],
) -> list[ClassResult]:
    """Each listed class on its own simulated requests (a small class: inconclusive, by
    the one verdict rule; a class with no arrivals: its objectives with no figure)."""
    labels = sc.labels[trace.src]
    ungated = replace(service, items=tuple(replace(o, gated=False) for o in service.items))
    judged = [(n, sc.classes.objectives_of(n, service), True) for n in sc.classes.names()]
    judged += [(n, ungated, False) for n in sc.unlisted]
    out = []
    for name, objs, listed in judged:
        keep = labels == name
        if not keep.any():
            empty = [ObjectiveResult(o, None, None, 0, 0) for o in objs if _simulable(o)]
            out.append(ClassResult(name, 0, empty, listed=listed))
            continue
        measured, skipped = _measured(_subset(trace, keep), objs, stages)
        out.append(ClassResult(name, int(keep.sum()), measured, skipped, listed))
    return out
