"""What drives each breached end-to-end or stage objective, read the way `rebudget` reads
its gaps.

The audit's LLM causes explain a breached TTFT or TPOT; an e2e objective over its target
gets the re-budget's reading of the requests above it (the stage holding most of their
time; on an LLM log, long answers or slow tokens), a stage objective the reading of the
requests slow in that stage (their time there, their sizes, whether they make the
end-to-end tail), from the one function both commands call (audit.gap.driver), so
the audit and rebudget say the same words and figures.
"""

from __future__ import annotations

import re

from tailbudget.audit.context import Ctx
from tailbudget.audit.gap import driver
from tailbudget.audit.profile import profile_of
from tailbudget.audit.report import Goodput, ObjectiveRow, Recommendation

__all__ = ["naming_every_breach", "naming_goodput", "with_drivers"]


def with_drivers(ctx: Ctx, rows: list[ObjectiveRow]) -> list[ObjectiveRow]:
    """The rows with `driver` set on each breached e2e or stage objective (profiled only
    then: a log within its objectives is not read a second time)."""
    breached = [
        o
        for o in rows
        if o.verdict == "breach" and o.measured_ms is not None and o.metric not in _LLM
    ]
    if not breached:
        return rows
    profile = profile_of(ctx.log)
    # The audit's own measured figure, so the gap is the one its objectives table shows.
    said: dict[str, str] = {}
    for o in breached:
        key = f"{o.metric}.{o.percentile}"
        got = driver(profile, key, o.target_ms, float(o.measured_ms or 0.0))
        if got is not None:
            said[key] = got.says
    return [
        o.model_copy(update={"driver": said[key]})
        if (key := f"{o.metric}.{o.percentile}") in said
        else o
        for o in rows
    ]


_LLM = ("ttft", "tpot", "itl")
"""Explained by the audit's LLM causes, not by a driver reading."""


def naming_every_breach(rec: Recommendation, rows: list[ObjectiveRow]) -> Recommendation:
    """The recommendation with each gated breach it does not name yet added (`e2e.p99`
    next to the `tpot.p99` fix it starts with), so no breached objective goes unsaid."""
    unsaid = [o for o in rows if o.gated and o.verdict == "breach" and not _named(o, rec.text)]
    if not unsaid:
        return rec
    named = "; ".join(
        f"{o.metric}.{o.percentile} {o.measured_ms:,.0f} ms against its {o.target_ms:,.0f} ms"
        + (" (what drives it is under Objectives)" if o.driver else "")
        for o in unsaid
    )
    text = rec.text.rstrip()
    text += ("" if text.endswith(".") else ".") + f" Also over target: {named}."
    return rec.model_copy(update={"text": text})


def _named(o: ObjectiveRow, text: str) -> bool:
    # The e2e tail's own recommendation names its percentile bare ("p99 is 15 ms over").
    key = f"{o.metric}.{o.percentile}"
    bare = o.metric == "e2e" and re.search(rf"(^|[\s(]){re.escape(o.percentile)} is ", text)
    return key in text or bool(bare)


def naming_goodput(rec: Recommendation, g: Goodput, failed: int) -> Recommendation:
    """A breached goodput minimum never gets "none": the recommendation says how many
    requests miss it and how (failed without a latency, or over a threshold), weak when
    no other finding names an action (a gated breach always gets a recommendation)."""
    if g.verdict != "breach" or g.min is None or rec.choice != "none" or not g.requests:
        return rec
    missed = g.requests - (g.good or 0)
    over = missed - failed
    limits = ", ".join(f"{m} {v:,.0f} ms" for m, v in g.thresholds.items())
    parts = [f"{over:,} over a threshold ({limits})"]
    if failed:
        parts.insert(0, f"{failed:,} failed without a latency")
    first = (
        "fix the failures first (they count against goodput and no latency fix recovers them)"
        if failed >= over
        else "fix what slows the requests over a threshold (the objectives say which)"
    )
    text = (
        f"Goodput {g.share:.1%} is under its {g.min:.1%} minimum: {missed:,} of "
        f"{g.requests:,} requests are not good ({'; '.join(parts)}): {first}. "
        f"{rec.text}"
    )
    return rec.model_copy(update={"choice": "fix_tail", "weak": True, "text": text.strip()})
