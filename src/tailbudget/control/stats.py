"""Confidence bounds the controller uses so it does not act on noise."""

from __future__ import annotations

import math
from statistics import NormalDist


def z_of(confidence: float) -> float:
    """One-sided normal quantile for a confidence level (0.975 -> 1.96)."""
    return NormalDist().inv_cdf(confidence)


def wilson(errors: float, count: float, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson score interval with continuity correction (lower, upper); None without trials.

    The continuity correction (Newcombe 1998, method 4) keeps the one-sided
    coverage near its nominal level at the small counts where the plain Wilson
    interval claims too much (at 1% and n = 200 the plain lower bound exceeds
    the true rate 5% of the time at a nominal 2.5%; this one 1.6%).
    """
    if count <= 0:
        return None
    n = float(count)
    x = min(n, max(0.0, float(errors)))
    p = x / n
    zz = z * z
    denom = 2.0 * (n + zz)
    lower = 0.0
    if x > 0:
        root = zz - 2.0 - 1.0 / n + 4.0 * p * (n * (1.0 - p) + 1.0)
        lower = max(0.0, (2.0 * n * p + zz - 1.0 - z * math.sqrt(max(root, 0.0))) / denom)
    upper = 1.0
    if x < n:
        root = zz + 2.0 - 1.0 / n + 4.0 * p * (n * (1.0 - p) - 1.0)
        upper = min(1.0, (2.0 * n * p + zz + 1.0 + z * math.sqrt(max(root, 0.0))) / denom)
    return lower, upper


def quantile_rank_bounds(q: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Ranks (as fractions) whose order statistics bound the true q-quantile.

    The number of samples below the true q-quantile is Binomial(n, q); its
    normal-approximation interval gives distribution-free bounds on the
    quantile: [x_(lo), x_(hi)] with lo, hi = q -/+ z * sqrt(q (1 - q) / n).
    """
    if n <= 0:
        return 0.0, 1.0
    half = z * math.sqrt(q * (1.0 - q) / n)
    return max(0.0, q - half), min(1.0, q + half)
