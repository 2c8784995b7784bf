"""Per-request objective metrics of a profile, with the audit's definitions.

The same definitions as `audit.objectives` (vLLM's `bench serve`): TTFT is the `ttft`
stage (or a `ttft_ms` column); TPOT is a `tpot_ms` column, else (e2e - ttft) /
(output_tokens - 1), its percentiles leaving out one-token answers; ITL is every
inter-token gap, pooled; e2e for an N-token answer is ttft + (N - 1) x tpot (TPOT 0 for
a one-token answer). Percentiles interpolate linearly between order statistics, as
numpy's default, vLLM and the audit do. `init --from` writes these figures and
`rebudget` checks objectives with them, so both agree with the audit on the same log.
"""

from __future__ import annotations

import numpy as np

from tailbudget._units import PERCENTILES, quantile_of
from tailbudget._verdict import Verdict, judge
from tailbudget.audit.profile import FloatArray, Profile
from tailbudget.budget.objectives import Objective

TTFT_COLUMN = "ttft_ms"
TPOT_COLUMN = "tpot_ms"


def ttft(profile: Profile) -> FloatArray | None:
    """Per-request TTFT (ms), when the log has it."""
    if "ttft" in profile.times:
        return profile.times["ttft"]
    return profile.covariates.get(TTFT_COLUMN)


def tpot(profile: Profile, *, one_token_as_zero: bool = False) -> FloatArray | None:
    """Per-request TPOT (ms); one-token answers are NaN (left out of percentiles) unless
    `one_token_as_zero` (goodput and e2e at N tokens count them as 0)."""
    first = ttft(profile)
    tokens = profile.covariates.get("output_tokens")
    if TPOT_COLUMN in profile.covariates:
        out = profile.covariates[TPOT_COLUMN].copy()
    elif first is not None and tokens is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(tokens > 1, (profile.total - first) / (tokens - 1), np.nan)
    else:
        return None
    if one_token_as_zero and tokens is not None:
        out = np.where(tokens <= 1, 0.0, out)
    return out


def values(profile: Profile, metric: str, output_tokens: int | None = None) -> FloatArray | None:
    """The values a metric's percentiles are taken over (finite ones), None when the log
    lacks the metric."""
    out: FloatArray | None
    if metric == "e2e":
        out = profile.total if output_tokens is None else _at_tokens(profile, output_tokens)
    elif metric == "ttft":
        out = ttft(profile)
    elif metric == "tpot":
        out = tpot(profile)
    elif metric == "itl":
        out = profile.gaps
    else:
        out = profile.times.get(metric)
    if out is None:
        return None
    finite: FloatArray = out[np.isfinite(out)]
    return finite


def _at_tokens(profile: Profile, tokens: int) -> FloatArray | None:
    first, per = ttft(profile), tpot(profile, one_token_as_zero=True)
    if first is None or per is None:
        return None
    out: FloatArray = first + (tokens - 1) * per
    return out


def measured(profile: Profile, objective: Objective) -> float | None:
    """The objective's measured figure on the profile (None: not in the log, or no data)."""
    got = values(profile, objective.metric, objective.output_tokens)
    if got is None or got.size == 0:
        return None
    return float(np.quantile(got, objective.q))


def count(profile: Profile, objective: Objective) -> int:
    """How many values the objective's percentile is taken over."""
    got = values(profile, objective.metric, objective.output_tokens)
    return 0 if got is None else int(got.size)


def judged(profile: Profile, objective: Objective) -> Verdict:
    """The objective's verdict on the profile by the one rule (tailbudget._verdict): the
    audit's figure, its count and the values over the target, as the audit counts them."""
    got = values(profile, objective.metric, objective.output_tokens)
    n = 0 if got is None else int(got.size)
    figure = float(np.quantile(got, objective.q)) if got is not None and n else None
    over = int((got > objective.target_ms).sum()) if got is not None else 0
    what = "gaps" if objective.metric == "itl" else "requests"
    return judge(objective.percentile, objective.target_ms, figure, n, over, what=what)


def good_share(
    profile: Profile, thresholds: dict[str, float], output_tokens: int | None = None
) -> tuple[float, int, int] | None:
    """(share, good, requests) meeting every per-request threshold, as the audit counts
    goodput: errors and requests that failed without a latency are in the denominator and
    never good; TPOT of a one-token answer and ITL without gaps count as 0. None when the
    log lacks a thresholded metric."""
    ok = np.ones(profile.used, dtype=bool)
    for metric, ms in thresholds.items():
        value = _good_value(profile, metric, output_tokens if metric == "e2e" else None)
        if value is None:
            return None
        with np.errstate(invalid="ignore"):
            ok &= value <= ms
    requests = profile.rows + profile.failed
    good = int(ok.sum())
    return (good / requests if requests else 0.0), good, requests


def _good_value(profile: Profile, metric: str, output_tokens: int | None) -> FloatArray | None:
    if metric == "tpot":
        return tpot(profile, one_token_as_zero=True)
    if metric == "itl":
        gap = profile.longest_gap
        return None if gap is None else np.nan_to_num(gap, nan=0.0)
    if metric == "e2e":
        return profile.total if output_tokens is None else _at_tokens(profile, output_tokens)
    if metric == "ttft":
        return ttft(profile)
    return profile.times.get(metric)


def spread(
    data: FloatArray | None, names: tuple[str, ...] = PERCENTILES
) -> dict[str, float] | None:
    """Percentiles of a metric's values by name, None without data."""
    if data is None or data.size == 0:
        return None

    return {p: float(np.quantile(data, quantile_of(p))) for p in names}
