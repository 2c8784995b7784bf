"""One-line takeaways written from the data, shown above each chart.

Each function reads only the typed records it is given and says the one thing a
reader should take from the chart; none of them invents a number.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailbudget import _fmt as fmt
from tailbudget._units import PERCENTILES
from tailbudget.audit.report import CohortRow, Percentiles, ShapeRow, Snapshot, StageRow, Tail
from tailbudget.control.replay_record import ReplayReport


def cdf(snapshot: Snapshot, slo: Percentiles) -> str:
    """Which percentiles breach their SLO, and by how much the worst one does."""
    over = []
    for p in PERCENTILES:
        got, target = getattr(snapshot, p), getattr(slo, p)
        if target is not None and target > 0:
            over.append((got / target - 1, p, got, target))
    if not over:
        return f"p99 is {fmt.ms(snapshot.p99)} ms; no SLO was given to compare it with."
    ratio, p, got, target = max(over)
    breaches = [o[1] for o in over if o[0] > 0]
    if not breaches:
        return (
            f"Every percentile meets its SLO; the closest is {p} at {fmt.ms(got)} ms, "
            f"{fmt.share(-ratio, 0)} under its {fmt.ms(target)} ms target."
        )
    return (
        f"{p} is {fmt.ms(got)} ms, {fmt.share(ratio, 0)} over its {fmt.ms(target)} ms SLO "
        f"({len(breaches)} of {len(over)} percentiles breach: {', '.join(breaches)})."
    )


def stages(rows: Sequence[StageRow]) -> str:
    """The stage furthest over its budget, else the stage with the largest p99."""
    worst: tuple[float, str, str, float, float] | None = None
    n_over = 0
    for s in rows:
        for p, lim in (s.budget or {}).items():
            if p in PERCENTILES and lim > 0:
                got = getattr(s, p)
                r = got / lim - 1
                n_over += r > 0
                if worst is None or r > worst[0]:
                    worst = (r, s.name, p, got, lim)
    if worst is not None and worst[0] > 0:
        r, name, p, got, lim = worst
        over = f"{r + 1:.1f}x" if r >= 1 else f"{fmt.share(r, 0)} over"
        return (
            f"{name} {p} is {fmt.ms(got)} ms, {over} its {fmt.ms(lim)} ms budget "
            f"({n_over} stage percentile{'s' if n_over != 1 else ''} over budget)."
        )
    if not rows:
        return "Per-stage percentiles."
    top = max(rows, key=lambda s: s.p99)
    head = "Every stage is within its budget; " if worst is not None else ""
    label = top.name
    if label == "unattributed":
        label = "unattributed time (total minus every stage)"
    return (
        f"{head}{label} has the largest p99 at {fmt.ms(top.p99)} ms, "
        f"{fmt.share(top.share_of_p99, 0)} of the end-to-end p99."
    )


def delta(tail: Tail) -> str:
    """The stage that drives the slow-vs-fast gap, as a share of the total gap."""
    top = tail.top_delta
    if top is None:
        return "Slow and fast requests spend about the same time in every stage."
    return (
        f"{top.stage} drives {fmt.share(tail.share_of_gap(top), 0)} of the slow-vs-fast gap "
        f"(+{fmt.ms(top.delta)} ms in slow requests: {fmt.ms(top.mean_slow)} vs "
        f"{fmt.ms(top.mean_fast)} ms)."
    )


def shape(entry: ShapeRow) -> str:
    """How fast a stage's latency grows with the covariate, and how much it explains."""
    stage, cov = entry.stage, entry.covariate
    fit = f"; {cov} explains {fmt.share(entry.r2, 0)} of its variance (R\u00b2 {fmt.r2(entry.r2)})"
    prof = entry.profile
    span = ""
    if len(prof) >= 2:
        lo, hi = min(prof, key=lambda b: b.x), max(prof, key=lambda b: b.x)
        span = f"; p95 goes from {fmt.ms(lo.p95_ms)} to {fmt.ms(hi.p95_ms)} ms across the bins"
    return f"{stage} grows {fmt.number(entry.slope)} ms per unit of {cov}{fit}{span}."


def cohorts(rows: Sequence[CohortRow]) -> str:
    """The cohort most over-represented among slow requests."""
    if not rows:
        return "Cohort p99 vs traffic share."
    top = max(rows, key=lambda c: c.share_of_slow - c.share)
    if top.share_of_slow > top.share:
        return (
            f"{top.dim}={top.value} carries {fmt.share(top.share, 0)} of traffic but "
            f"{fmt.share(top.share_of_slow, 0)} of slow requests (p99 {fmt.ms(top.p99)} ms)."
        )
    top = max(rows, key=lambda c: c.p99)
    return f"The slowest cohort is {top.dim}={top.value} with p99 {fmt.ms(top.p99)} ms."


def replay(rep: ReplayReport) -> str:
    """How many decisions the controller took, the first one, and the window p99 peak."""
    peak = rep.peak_p99_ms
    tail = f"; window p99 peaked at {fmt.ms(peak)} ms" if peak is not None else ""
    if not rep.decisions:
        return f"The policy took no action over this log{tail}."
    first = min(rep.decisions, key=lambda d: d.t_offset_s)
    why = ""
    if first.value is not None and first.threshold is not None:
        why = (
            f" ({first.metric} {fmt.threshold(first.metric, first.value)} > "
            f"{fmt.threshold(first.metric, first.threshold)})"
        )
    n = len(rep.decisions)
    kinds = sorted({d.action for d in rep.decisions})
    return (
        f"{n} decision{'s' if n != 1 else ''} ({', '.join(kinds)}); "
        f"the first, {first.action} at +{first.t_offset_s / 60:.1f} min{why}{tail}."
    )
