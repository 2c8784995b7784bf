"""Baselines from a baseline log: the "before" every `_vs_baseline` rule compares with.

`replay --baseline LOG2` measures, over the whole of LOG2, the end-to-end p99
and every metric a rule of the policy compares with its baseline: a
percentile of e2e, ttft, tpot, itl (every gap) or a stage, and goodput (the
share of judged requests that are good, judged as the live windows judge
them). Percentiles are exact over the log's values, as the e2e p99 always was.
A metric the baseline log does not carry, or carries for fewer than the
policy's `min_samples` requests, gets no baseline: its rule stays inactive and
a note says why, never a baseline guessed from elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailbudget import _fmt as fmt
from tailbudget.budget.metric import LLM_SERIES, MetricRef, parse_metric
from tailbudget.budget.policy import Policy
from tailbudget.control.logsource import ReplayLog
from tailbudget.control.series_windows import judge

__all__ = ["LogBaselines", "log_baselines"]


@dataclass(frozen=True)
class LogBaselines:
    """The baselines measured from a log, by metric (`p99`, `ttft.p99`, `goodput`)."""

    values: dict[str, float]
    counts: dict[str, int]
    """Requests (or, for itl, gaps) each baseline was measured over."""
    missing: dict[str, str]
    """Metrics a rule compares with a baseline that the log could not give, and why."""

    def describe(self, source: str) -> list[str]:
        """Notes for the replay: each baseline with its count, each gap with its reason."""
        shown = ", ".join(
            f"{name} {fmt.threshold(name, v)} ({fmt.count(self.counts[name])} values)"
            for name, v in sorted(self.values.items())
        )
        out = [f"baselines from {source}: {shown}"] if shown else []
        out += [f"no {name} baseline from {source}: {why}" for name, why in self.missing.items()]
        return out


def _wanted(policy: Policy) -> list[MetricRef]:
    """The end-to-end p99 and every metric a rule compares with its baseline."""
    out = [parse_metric("p99")]
    for rule in policy.rules:
        ref = rule.ref
        if ref.kind == "goodput_vs_baseline":
            out.append(parse_metric("goodput"))
        elif ref.kind == "vs_baseline":
            out.append(parse_metric(ref.name.removesuffix("_vs_baseline")))
    unique = {ref.name: ref for ref in out}
    return list(unique.values())


def _values(log: ReplayLog, series: str) -> npt.NDArray[np.float64] | None:
    if series == "e2e":
        return log.total_ms
    col = log.series.get(series) if series in LLM_SERIES else log.stages.get(series)
    return None if col is None else col.ms


def _goodput(log: ReplayLog, policy: Policy) -> tuple[float, int] | str:
    if not policy.goodput:
        return "the budget sets no per-request goodput thresholds"
    judged, good = judge(log.total_ms, log.error, log.series, log.stages, policy.goodput)
    n = int(np.count_nonzero(judged))
    if n < policy.min_samples:
        names = ", ".join(sorted(policy.goodput))
        return f"{n} requests carry every metric a goodput threshold names ({names})"
    share = float(np.count_nonzero(good & judged)) / n
    if share == 0:
        return f"none of its {n} judged requests was good; a baseline share must be > 0"
    return share, n


def log_baselines(log: ReplayLog, policy: Policy) -> LogBaselines:
    """Every baseline `policy` compares with, measured over the whole of `log`."""
    values: dict[str, float] = {}
    counts: dict[str, int] = {}
    missing: dict[str, str] = {}
    for ref in _wanted(policy):
        if ref.kind == "goodput":
            got = _goodput(log, policy)
            if isinstance(got, str):
                missing[ref.name] = got
            else:
                values[ref.name], counts[ref.name] = got
            continue
        data = _values(log, ref.series)
        if data is None or data.size < policy.min_samples:
            have = "no" if data is None else f"only {data.size}"
            missing[ref.name] = f"{have} {ref.series} values (at least {policy.min_samples} needed)"
            continue
        assert ref.q is not None
        value = float(np.quantile(data, ref.q))
        if not value > 0:
            missing[ref.name] = f"its {ref.percentile} is {value:g} ms; a baseline must be > 0"
            continue
        values[ref.name], counts[ref.name] = value, int(data.size)
    return LogBaselines(values, counts, missing)
