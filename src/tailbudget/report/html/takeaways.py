"""One-line takeaways written from the data, shown above each chart.

Each function reads only the report dict it is given and says the one thing a
reader should take from the chart; none of them invents a number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tailbudget._units import PERCENTILES
from tailbudget.report.html.page import fmt_ms, is_num


def cdf(snapshot: Mapping[str, Any], slo: Mapping[str, Any]) -> str:
    """Which percentiles breach their SLO, and by how much the worst one does."""
    over = []
    for p in PERCENTILES:
        got, target = snapshot.get(p), slo.get(p)
        if is_num(got) and is_num(target) and float(target) > 0:
            over.append((float(got) / float(target) - 1, p, float(got), float(target)))
    if not over:
        if is_num(snapshot.get("p99")):
            return f"p99 is {fmt_ms(snapshot['p99'])} ms; no SLO was given to compare it with."
        return "The latency distribution of every request in the log."
    worst = max(over)
    ratio, p, got, target = worst
    breaches = [o[1] for o in over if o[0] > 0]
    if not breaches:
        return (
            f"Every percentile meets its SLO; the closest is {p} at {fmt_ms(got)} ms, "
            f"{-ratio:.0%} under its {fmt_ms(target)} ms target."
        )
    return (
        f"{p} is {fmt_ms(got)} ms, {ratio:.0%} over its {fmt_ms(target)} ms SLO "
        f"({len(breaches)} of {len(over)} percentiles breach: {', '.join(breaches)})."
    )


def stages(rows: Sequence[Mapping[str, Any]]) -> str:
    """The stage furthest over its budget, else the stage with the largest p99."""
    worst: tuple[float, str, str, float, float] | None = None
    n_over = 0
    for s in rows:
        budget = s.get("budget") or {}
        for p in PERCENTILES:
            got, lim = s.get(p), budget.get(p)
            if is_num(got) and is_num(lim) and float(lim) > 0:
                r = float(got) / float(lim) - 1
                n_over += r > 0
                if worst is None or r > worst[0]:
                    worst = (r, str(s.get("name")), p, float(got), float(lim))
    if worst is not None and worst[0] > 0:
        r, name, p, got, lim = worst
        over = f"{r + 1:.1f}x" if r >= 1 else f"{r:.0%} over"
        return (
            f"{name} {p} is {fmt_ms(got)} ms, {over} its {fmt_ms(lim)} ms budget "
            f"({n_over} stage percentile{'s' if n_over != 1 else ''} over budget)."
        )
    big = [s for s in rows if is_num(s.get("p99"))]
    if not big:
        return "Per-stage percentiles."
    top = max(big, key=lambda s: float(s["p99"]))
    share = top.get("share_of_p99")
    tail = f", {float(share):.0%} of the end-to-end p99" if is_num(share) else ""
    head = "Every stage is within its budget; " if worst is not None else ""
    label = str(top.get("name"))
    if label == "unattributed":
        label = "time outside every stage (unattributed)"
    return f"{head}{label} has the largest p99 at {fmt_ms(top['p99'])} ms{tail}."


def delta(tail: Mapping[str, Any]) -> str:
    """The stage that drives the slow-vs-fast gap, as a share of the total gap."""
    rows = [d for d in tail.get("deltas") or [] if is_num(d.get("delta"))]
    pos = sum(max(0.0, float(d["delta"])) for d in rows)
    if not rows or pos <= 0:
        return "Slow and fast requests spend about the same time in every stage."
    top = max(rows, key=lambda d: float(d["delta"]))
    return (
        f"{top.get('stage')} drives {float(top['delta']) / pos:.0%} of the slow-vs-fast gap "
        f"(+{fmt_ms(top['delta'])} ms in slow requests: {fmt_ms(top.get('mean_slow'))} vs "
        f"{fmt_ms(top.get('mean_fast'))} ms)."
    )


def shape(entry: Mapping[str, Any]) -> str:
    """How fast a stage's latency grows with the covariate, and how much it explains."""
    stage, cov = entry.get("stage"), entry.get("covariate")
    slope, r2 = entry.get("slope"), entry.get("r2")
    if not is_num(slope):
        return f"{stage} latency binned by {cov}."
    fit = (
        f"; {cov} explains {float(r2):.0%} of its variance (R\u00b2 {float(r2):.2f})"
        if is_num(r2)
        else ""
    )
    prof = [b for b in entry.get("profile") or [] if is_num(b.get("x")) and is_num(b.get("p95_ms"))]
    span = ""
    if len(prof) >= 2:
        lo, hi = min(prof, key=lambda b: b["x"]), max(prof, key=lambda b: b["x"])
        span = (
            f"; p95 goes from {fmt_ms(lo['p95_ms'])} to {fmt_ms(hi['p95_ms'])} ms across the bins"
        )
    return f"{stage} grows {float(slope):,.3g} ms per unit of {cov}{fit}{span}."


def cohorts(rows: Sequence[Mapping[str, Any]]) -> str:
    """The cohort most over-represented among slow requests."""
    good = [c for c in rows if is_num(c.get("share")) and is_num(c.get("p99"))]
    if not good:
        return "Cohort p99 vs traffic share."
    with_slow = [c for c in good if is_num(c.get("share_of_slow"))]
    if with_slow:
        top = max(with_slow, key=lambda c: float(c["share_of_slow"]) - float(c["share"]))
        if float(top["share_of_slow"]) > float(top["share"]):
            name = f"{top.get('dim')}={top.get('value')}"
            return (
                f"{name} carries {float(top['share']):.0%} of traffic but "
                f"{float(top['share_of_slow']):.0%} of slow requests (p99 {fmt_ms(top['p99'])} ms)."
            )
    top = max(good, key=lambda c: float(c["p99"]))
    name = f"{top.get('dim')}={top.get('value')}"
    return f"The slowest cohort is {name} with p99 {fmt_ms(top['p99'])} ms."


def replay(rep: Mapping[str, Any]) -> str:
    """How many decisions the controller took, the first one, and the window p99 peak."""
    decisions = [d for d in rep.get("decisions") or [] if isinstance(d, Mapping)]
    p99s = [float(w["p99"]) for w in rep.get("timeline") or [] if is_num(w.get("p99"))]
    peak = f"; window p99 peaked at {fmt_ms(max(p99s))} ms" if p99s else ""
    if not decisions:
        return f"The policy took no action over this log{peak}."
    first = min(
        decisions, key=lambda d: float(d["t_offset_s"]) if is_num(d.get("t_offset_s")) else 0.0
    )
    when = (
        f" at +{float(first['t_offset_s']) / 60:.1f} min" if is_num(first.get("t_offset_s")) else ""
    )
    why = ""
    if is_num(first.get("value")) and is_num(first.get("threshold")):
        value, thr = float(first["value"]), float(first["threshold"])
        why = f" ({first.get('metric')} {value:,.4g} > {thr:,.4g})"
    kinds = sorted({str(d.get("action")) for d in decisions})
    return (
        f"{len(decisions)} decision{'s' if len(decisions) != 1 else ''} ({', '.join(kinds)}); "
        f"the first, {first.get('action')}{when}{why}{peak}."
    )
