"""Stage latency distributions for the Monte Carlo composition.

Each draws from a standard normal `z` so that stages can be correlated
through a Gaussian copula; the independent case passes independent `z`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray
from scipy import special, stats

from tailbudget._units import quantile_of
from tailbudget.errors import BudgetError

FloatArray = NDArray[np.float64]


class Distribution(Protocol):
    """A stage's latency distribution in milliseconds."""

    def from_normal(self, z: FloatArray) -> FloatArray:
        """Map standard-normal draws to latencies (in place where possible)."""

    def ppf(self, q: float) -> float:
        """The q-quantile in milliseconds."""


@dataclass(frozen=True, slots=True)
class Lognormal:
    """exp(mu + sigma * Z): the usual shape of a service latency."""

    mu: float
    sigma: float
    points: int = 0
    """How many given percentiles the fit used (0 = built directly)."""
    default_spread: bool = False
    """True when sigma is the documented default, not fitted."""

    def from_normal(self, z: FloatArray) -> FloatArray:
        z *= self.sigma
        z += self.mu
        return np.exp(z, out=z)

    def ppf(self, q: float) -> float:
        return math.exp(self.mu + self.sigma * float(special.ndtri(q)))


@dataclass(frozen=True, slots=True)
class Normal:
    """mu + sigma * Z (may go negative; for closed-form checks and tight stages)."""

    mu: float
    sigma: float

    def from_normal(self, z: FloatArray) -> FloatArray:
        z *= self.sigma
        z += self.mu
        return z

    def ppf(self, q: float) -> float:
        return self.mu + self.sigma * float(special.ndtri(q))


@dataclass(frozen=True, slots=True)
class Exponential:
    """Exponential with the given mean (memoryless queueing delay)."""

    mean: float

    def from_normal(self, z: FloatArray) -> FloatArray:
        # Upper-tail probability of z, then the exponential's inverse survival function.
        sf = special.ndtr(-z)
        return -self.mean * np.log(sf)

    def ppf(self, q: float) -> float:
        return float(stats.expon.ppf(q, scale=self.mean))


@dataclass(frozen=True, slots=True)
class Constant:
    """A fixed duration."""

    value: float

    def from_normal(self, z: FloatArray) -> FloatArray:
        z.fill(self.value)
        return z

    def ppf(self, q: float) -> float:
        return self.value


def fit_lognormal(points: dict[str, float], *, default_sigma: float = 0.5) -> Lognormal:
    """Fit a lognormal to {'p95': ms, ...} by least squares in log space.

    ln(x_q) = mu + sigma * z_q. With one point, sigma is `default_sigma`
    (stated in the output). Points that imply no spread (all equal) get a
    small floor so the stage still varies a little.
    """
    if not points:
        raise BudgetError("cannot fit a distribution without at least one percentile")
    zs = np.array([float(special.ndtri(quantile_of(k))) for k in points])
    ys = np.log(np.array(list(points.values()), dtype=float))
    if len(points) == 1:
        sigma = default_sigma
        mu = float(ys[0] - sigma * zs[0])
        return Lognormal(mu=mu, sigma=sigma, points=1, default_spread=True)
    slope, intercept = np.polyfit(zs, ys, 1)
    sigma = max(float(slope), 1e-3)
    mu = float(np.mean(ys - sigma * zs)) if sigma != slope else float(intercept)
    return Lognormal(mu=mu, sigma=sigma, points=len(points))
