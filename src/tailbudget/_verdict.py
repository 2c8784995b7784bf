"""The one verdict rule on a measured percentile: breach, pass or inconclusive.

Every command that judges an objective on measured requests (audit, plan on a measured
budget, `measure_budget`/`init --from`, rebudget, replay, serve, simulate attainment,
the canary) calls `judge`, so one objective gets one verdict everywhere.

An objective at percentile q with target T over n requests, k of them over T:

- `breach` when the data prove it: an exact one-sided binomial test rejects "the share
  of requests over T is at most 1 - q" at 95% (P[K >= k | n, 1 - q] <= 0.05), however
  small n is. A minimum sample makes the *pass* side careful; it never blinds the
  breach side (3 of 20 requests over a p99 target prove a breach at 99.9%).
- `pass` when the measured percentile is at most T and n is enough for q: one request
  beyond the percentile on average (`min_rows`: 100 for p99).
- `inconclusive` otherwise, saying how many more requests (at the share over T seen so
  far) would settle it.

`confidence` is the exact test's confidence in the side the data lean to: for a breach
(or a figure over T) 1 - P[K >= k | n, 1 - q]; for a pass (or a figure within T)
1 - P[K <= k | n, 1 - q], how sure the data are that no more than 1 - q are over T.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from tailbudget._units import min_rows, quantile_of

LEVEL = 0.95
"""The confidence a breach must be proved at."""
MAX_MORE = 10**9
"""Beyond this many more requests, `more` is None: no practical log settles it."""

VerdictName = Literal["pass", "breach", "inconclusive", "no_data"]


@dataclass(frozen=True)
class Verdict:
    """One objective's verdict with what it rests on."""

    verdict: VerdictName
    n: int
    """Requests (gaps, for itl) the figure is measured on."""
    over: int | None
    """How many of them are over the target (None: not counted)."""
    confidence: float | None
    """The exact test's confidence in the side the data lean to (see the module)."""
    more: int | None = None
    """For an inconclusive verdict: how many more requests, at the share over the target
    seen so far, would settle it (None: no number would, or it is not inconclusive)."""
    reason: str = ""
    """One line a person can read: why this verdict (empty for a plain pass)."""


def _sf(k: int, n: int, p: float) -> float:
    """P[K >= k] for K ~ Binomial(n, p): the exact one-sided p-value of k over."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    # A start-up guard: scipy loads on first use, not with this module.
    from scipy.special import bdtrc  # scipy.special is light; scipy.stats is not

    return float(bdtrc(k - 1, n, p))


def _cdf(k: int, n: int, p: float) -> float:
    """P[K <= k] for K ~ Binomial(n, p)."""
    if k >= n:
        return 1.0
    # A start-up guard: scipy loads on first use, not with this module.
    from scipy.special import bdtr

    return float(bdtr(k, n, p))


def proves_breach(over: int, n: int, q: float, level: float = LEVEL) -> bool:
    """True when k = `over` of `n` rejects "share over <= 1 - q" at `level` (exact test)."""
    return bool(_proved(np.asarray([over]), np.asarray([n]), q, level)[0])


def _proved(
    over: npt.NDArray[np.int64], n: npt.NDArray[np.int64], q: float, level: float
) -> npt.NDArray[np.bool_]:
    """The breach side of the rule, element-wise: k over of n rejects "share over <= 1 - q"
    at `level` (exact one-sided binomial test)."""
    # A start-up guard: scipy loads on first use, not with this module.
    from scipy.special import bdtrc

    over, n = np.asarray(over, dtype=np.int64), np.asarray(n, dtype=np.int64)
    k = np.clip(over, 1, np.maximum(n, 1))
    sf = np.asarray(bdtrc(k - 1, np.maximum(n, 1), 1.0 - q), dtype=np.float64)
    return (n > 0) & (over > n * (1.0 - q)) & (sf <= 1.0 - level + 1e-12)


VERDICT_CODES: tuple[VerdictName, ...] = ("pass", "breach", "inconclusive", "no_data")
"""What `verdicts` codes 0..3 mean."""


def verdicts(
    percentile: str,
    target_ms: float,
    measured_ms: npt.NDArray[np.float64],
    n: npt.NDArray[np.int64],
    over: npt.NDArray[np.int64],
    *,
    level: float = LEVEL,
) -> npt.NDArray[np.int8]:
    """`judge`'s verdict on many figures of one objective at once (the simulator's
    minutes), as codes into VERDICT_CODES: the same rule, without the reasons and without
    counting the requests that would settle an inconclusive one (too dear per minute)."""
    q, need = quantile_of(percentile), min_rows(percentile)
    fig = np.asarray(measured_ms, dtype=np.float64)
    n = np.asarray(n, dtype=np.int64)
    over = np.clip(np.asarray(over, dtype=np.int64), 0, np.maximum(n, 0))
    out = np.full(fig.shape, 2, dtype=np.int8)
    out[(fig <= target_ms) & (n >= need)] = 0
    out[_proved(over, n, q, level)] = 1
    out[~np.isfinite(fig) | (n <= 0)] = 3
    return out


def breach_confidence(over: int, n: int, q: float) -> float:
    """1 - P[K >= over | n, 1 - q]: how sure the data are that more than 1 - q are over."""
    return 1.0 - _sf(over, n, 1.0 - q) if n > 0 else 0.0


def pass_confidence(over: int, n: int, q: float) -> float:
    """1 - P[K <= over | n, 1 - q]: how sure the data are that at most 1 - q are over."""
    return 1.0 - _cdf(over, n, 1.0 - q) if n > 0 else 0.0


def _more_for_breach(over: int, n: int, q: float, level: float) -> int | None:
    """Fewest more requests, at the share over seen (k/n), that prove a breach; None when
    that share is within what q allows, or when it takes more than MAX_MORE."""
    share = over / n if n else 0.0
    if share <= 1.0 - q:
        return None

    def proves(extra: int) -> bool:
        total = n + extra
        return proves_breach(math.floor(share * total + 1e-9), total, q, level)

    hi = max(1, n)
    while not proves(hi):
        hi *= 2
        if hi > MAX_MORE:
            return None
    lo = 0  # proves(lo) is False (else the verdict was already breach)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if proves(mid) else (mid, hi)
    return hi


def judge(
    percentile: str,
    target_ms: float,
    measured_ms: float | None,
    n: int,
    over: int | None,
    *,
    level: float = LEVEL,
    what: str = "requests",
) -> Verdict:
    """The verdict on an objective `percentile` <= `target_ms`, measured as `measured_ms`
    on `n` values of which `over` exceed the target (see the module for the rule).

    `over` None (a caller that cannot count) falls back to the figure alone: a breach
    then needs the minimum sample, as a pass does."""
    q = quantile_of(percentile)
    need = min_rows(percentile)
    if measured_ms is None or n <= 0:
        return Verdict("no_data", max(n, 0), over, None, reason=f"no {what} to judge")
    if over is None:
        return _uncounted(percentile, target_ms, measured_ms, n, need, what)
    over = max(0, min(int(over), n))
    if proves_breach(over, n, q, level):
        conf = breach_confidence(over, n, q)
        return Verdict(
            "breach",
            n,
            over,
            conf,
            reason=(
                f"{over:,} of {n:,} {what} over {target_ms:,.6g} ms, more than the "
                f"{1.0 - q:.2g} share {percentile} allows (exact binomial test, "
                f"{_pct(conf)} confidence)"
            ),
        )
    if measured_ms <= target_ms and n >= need:
        return Verdict("pass", n, over, pass_confidence(over, n, q))
    return _inconclusive(percentile, target_ms, measured_ms, n, over, level, what)


def _pct(conf: float) -> str:
    """0.9912 -> '99.1%'; never rounds a short confidence up to 100% ('over 99.9%')."""
    return "over 99.9%" if conf > 0.999 else f"{math.floor(conf * 1000) / 10:.1f}%"


def _inconclusive(
    percentile: str,
    target_ms: float,
    measured_ms: float,
    n: int,
    over: int,
    level: float,
    what: str,
) -> Verdict:
    q, need = quantile_of(percentile), min_rows(percentile)
    head = f"{over:,} of {n:,} {what} over {target_ms:,.6g} ms"
    if measured_ms <= target_ms:  # within the target, on too few requests
        more = need - n
        return Verdict(
            "inconclusive",
            n,
            over,
            pass_confidence(over, n, q),
            more,
            f"{head}: within the target, but {percentile} needs {need:,} {what} for a pass "
            f"({more:,} more)",
        )
    more_b = _more_for_breach(over, n, q, level)
    conf = breach_confidence(over, n, q)
    if more_b is None:
        tail = (
            f"not the share that proves a breach at {level:.0%} ({_pct(conf)}); more "
            "requests settle it"
        )
    else:
        tail = (
            f"over the target, but not yet proved a breach at {level:.0%} ({_pct(conf)}); "
            f"about {more_b:,} more at this share would prove it"
        )
    return Verdict("inconclusive", n, over, conf, more_b, f"{head}: {tail}")


def judge_share(good: int, n: int, minimum: float, *, level: float = LEVEL) -> str:
    """Goodput's verdict by the same test: `breach` when an exact one-sided binomial
    test rejects "the good share is at least `minimum`" at `level` (P[G <= good | n,
    minimum] <= 1 - level), however few the requests; `pass` when the share meets the
    minimum; `inconclusive` when it is under it by less than the requests prove."""
    if n <= 0:
        return "inconclusive"
    if good / n >= minimum:
        return "pass"
    proved = _cdf(good, n, minimum) <= 1.0 - level + 1e-12
    return "breach" if proved else "inconclusive"


def _uncounted(
    percentile: str, target_ms: float, measured_ms: float, n: int, need: int, what: str
) -> Verdict:
    if n < need:
        return Verdict(
            "inconclusive",
            n,
            None,
            None,
            need - n,
            f"{n:,} {what}, {need:,} needed for {percentile} ({need - n:,} more)",
        )
    return Verdict("pass" if measured_ms <= target_ms else "breach", n, None, None)
