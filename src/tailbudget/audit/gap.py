"""What makes an end-to-end gap, for the options a re-budget offers, and the audit's own
fixes for a breached TTFT, TPOT or ITL objective.

A gap at e2e p99 is read on the requests above that percentile (whole requests): the
stage that holds most of their time, and, on an LLM log, whether their answers are long
or their tokens slow (each against the log's median), so the options say which lever
the gap needs. A breached LLM objective gets the fixes the audit ranks for it, from the
audit itself (llm_causes), so both commands give the same figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tailbudget import _fmt as fmt
from tailbudget._units import MetricKey, quantile_of
from tailbudget.audit import metrics
from tailbudget.audit.profile import FloatArray, Profile

if TYPE_CHECKING:
    pass

LONG = 1.25
"""Answers count as long (tokens as slow) at this multiple of the log's median or more:
the slow requests' answers 1.5x the median length, or their tokens 1.5x slower, are what
makes them slow (the time is tokens x TPOT), and the reading must say so."""
LLM_METRICS = ("ttft", "tpot", "itl")
FEW = 20
"""Below this many requests above the percentile, the reading is said to be rough (the
audit's slow-group bound)."""


@dataclass(frozen=True)
class Gap:
    """Where an end-to-end objective's gap lies, on the requests above the percentile."""

    objective: str
    over_ms: float
    requests: int
    """Requests at or above the measured percentile, the gap is read on."""
    stage: str | None
    """The stage holding most of those requests' time."""
    share: float | None
    """That stage's share of their time."""
    says: str


def gaps(
    profile: Profile, slo: dict[str, float], gated: Sequence[str], measured: dict[str, float]
) -> tuple[Gap, ...]:
    """One Gap per gated e2e percentile the log breaches."""
    out: list[Gap] = []
    for p in gated:
        over = measured[p] - slo[p]
        if over > 0 and profile.used:
            out.append(_gap(profile, p, over, measured[p]))
    return tuple(out)


def driver(profile: Profile, objective: str, target: float, measured: float) -> Gap | None:
    """What drives one breached objective, e2e (`e2e.p99`) or a stage (`retrieval.p99`):
    the one reading the audit's `objectives[].driver` and rebudget's `gaps[]` both give.
    None when it is not breached or the log has no such stage."""
    found = MetricKey.split(objective)  # an objective's key: a metric or stage, a percentile
    if found is None or found[0] is None:
        return None
    metric, p = found
    over = measured - target
    if over <= 0 or not profile.used:
        return None
    if metric == "e2e":
        return _gap(profile, p, over, measured)
    if metric in profile.times:
        return _stage_gap(profile, metric, p, over, measured)
    return None


def _stage_gap(profile: Profile, stage: str, p: str, over: float, at: float) -> Gap:
    # The requests whose time in the stage reaches the measured percentile: is it the
    # stage's own tail (their median there against the requests that call it), do they
    # carry larger inputs, and do they also make the end-to-end tail at that percentile?
    times = profile.times[stage]
    tail = times >= min(at, float(np.max(times)))
    n = int(tail.sum())
    says = f"{stage}.{p} is {fmt.ms(over)} ms over its target"
    slow, usual = _median(times[tail]), _median(times[times > 0])
    if slow is not None and usual is not None:
        says += (
            f": the {_n_at(n)} at or above it {'spends' if n == 1 else 'spend'} "
            f"{fmt.ms(slow)} ms there at the median "
            f"(every request that calls it: {fmt.ms(usual)} ms)"
        )
    sizes = _sizes(profile, tail)
    if sizes:
        says += f"; {sizes}"
    e2e_at = float(np.quantile(profile.total, quantile_of(p)))
    also = float(np.mean(profile.total[tail] >= e2e_at)) if n else 0.0
    says += f"; {fmt.share(also, 0)} of them are also above the end-to-end {p}"
    if n < FEW:
        says += f" (only {_n_at(n)} at or above it: a rough reading)"
    spent = float(profile.total[tail].sum())
    share = float(times[tail].sum()) / spent if spent > 0 else None
    return Gap(f"{stage}.{p}", over, n, stage, share, says)


def _n_at(n: int) -> str:
    return fmt.counted(n, "request")


def _sizes(profile: Profile, tail: np.ndarray) -> str:
    # Prompt and answer lengths of the slow requests against the log's medians.
    out = []
    for name, what in (("input_tokens", "prompts"), ("output_tokens", "answers")):
        values = profile.covariates.get(name)
        if values is None:
            continue
        k_tail, k_all = _median(values[tail]), _median(values)
        if k_tail is not None and k_all is not None:
            out.append(
                f"their {what} run {k_tail:,.0f} tokens at the median (the log's median "
                f"{k_all:,.0f})"
            )
    return "; ".join(out)


def _gap(profile: Profile, p: str, over: float, at: float) -> Gap:
    tail = profile.total >= min(at, float(np.max(profile.total)))
    n = int(tail.sum())
    spent = float(profile.total[tail].sum())
    shares = {s: float(t[tail].sum()) / spent for s, t in profile.times.items() if spent > 0}
    stage = max(shares, key=lambda s: shares[s]) if shares else None
    says = f"e2e.{p} is {fmt.ms(over)} ms over its target"
    if stage is not None:
        held = fmt.share(shares[stage], 0)  # n/a where extreme figures overflow the sum
        says += f": {stage} holds {held} of the time of the {_n_at(n)} at or above it"
    why = _answers(profile, tail)
    if why:
        says += f"; {why}"
    if n < FEW:
        says += f" (only {_n_at(n)} at or above it: a rough reading)"
    return Gap(f"e2e.{p}", over, n, stage, shares.get(stage) if stage else None, says)


def _answers(profile: Profile, tail: np.ndarray) -> str:
    # Long answers or slow tokens: the tail's medians against the whole log's.
    tokens, tpot = profile.covariates.get("output_tokens"), metrics.tpot(profile)
    if tokens is None or tpot is None:
        return ""
    k_tail, k_all = _median(tokens[tail]), _median(tokens)
    t_tail, t_all = _median(tpot[tail]), _median(tpot)
    if None in (k_tail, k_all, t_tail, t_all):
        return ""
    assert k_tail is not None and k_all is not None and t_tail is not None and t_all is not None
    long, slow = k_tail >= LONG * k_all, t_tail >= LONG * t_all
    what = (
        "long answers and slow tokens"
        if long and slow
        else "long answers, not slow tokens: shorter answers (max_tokens) or faster decode"
        if long
        else "slow tokens, not long answers: faster decode per token"
        if slow
        else "neither unusually long answers nor slow tokens"
    )
    return (
        f"their answers run {k_tail:,.0f} output tokens at the median ({_times(k_tail, k_all)} "
        f"the log's median of {k_all:,.0f}) at {fmt.ms(t_tail)} ms a token "
        f"({_times(t_tail, t_all)} the log's median of {fmt.ms(t_all)}): {what}"
    )


def _times(tail: float, whole: float) -> str:
    # The ratio the verdict reads (LONG): "1.5x".
    return f"{tail / whole:,.1f}x" if whole > 0 else "n/a"


def _median(values: FloatArray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.quantile(finite, quantile_of("p50"))) if finite.size else None
