"""Stage latency distributions for the Monte Carlo composition.

Each draws from a standard normal `z` so that stages can be correlated
through a Gaussian copula; the independent case passes independent `z`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from tailbudget._units import quantile_of
from tailbudget.errors import BudgetError

FloatArray = NDArray[np.float64]


_STD_NORMAL = NormalDist()


def _ndtri(q: float) -> float:
    """Standard-normal quantile (scipy.special.ndtri for a scalar, without importing scipy)."""
    return _STD_NORMAL.inv_cdf(q)


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
        return math.exp(self.mu + self.sigma * float(_ndtri(q)))


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
        return self.mu + self.sigma * float(_ndtri(q))


@dataclass(frozen=True, slots=True)
class Exponential:
    """Exponential with the given mean (memoryless queueing delay)."""

    mean: float

    def from_normal(self, z: FloatArray) -> FloatArray:
        # Upper-tail probability of z, then the exponential's inverse survival function.
        from scipy import special  # lazily: scipy costs most of a second at import

        sf: FloatArray = special.ndtr(-z)
        np.log(sf, out=sf)
        sf *= -self.mean
        return sf

    def ppf(self, q: float) -> float:
        # Closed form of the exponential's quantile; keeps scipy.stats off the import path.
        return -self.mean * math.log1p(-q)


@dataclass(frozen=True, slots=True)
class Constant:
    """A fixed duration."""

    value: float

    def from_normal(self, z: FloatArray) -> FloatArray:
        z.fill(self.value)
        return z

    def ppf(self, q: float) -> float:
        return self.value


@dataclass(frozen=True, slots=True)
class SplicedLognormal:
    """Lognormal pieces joined at the given percentiles: exact at every given point.

    ln(x) is piecewise linear in z between the knots (each piece a lognormal
    with its own sigma) and extends with the end pieces' slopes. A single
    lognormal cannot honour p50/p95/p99 whose tail is heavier than its own
    (the seed's 1:2:4 ratios); a least-squares compromise then overstates p95
    by a fifth and the composition would mislead.
    """

    z: tuple[float, ...]
    log_ms: tuple[float, ...]

    def _knots(self) -> tuple[FloatArray, FloatArray]:
        z = np.asarray(self.z)
        y = np.asarray(self.log_ms)
        lo = (y[1] - y[0]) / (z[1] - z[0])
        hi = min((y[-1] - y[-2]) / (z[-1] - z[-2]), MAX_TAIL_SIGMA)
        # Outer knots far beyond any draw turn np.interp's clamping into extrapolation.
        zz = np.concatenate(([-_FAR], z, [_FAR]))
        yy = np.concatenate(([y[0] + lo * (-_FAR - z[0])], y, [y[-1] + hi * (_FAR - z[-1])]))
        return zz, yy

    @property
    def sigmas(self) -> tuple[float, ...]:
        """Log-space spread of each piece between consecutive knots."""
        return tuple(
            (self.log_ms[i + 1] - self.log_ms[i]) / (self.z[i + 1] - self.z[i])
            for i in range(len(self.z) - 1)
        )

    def from_normal(self, z: FloatArray) -> FloatArray:
        slopes = self.sigmas
        if len(slopes) > 2 or slopes[-1] > MAX_TAIL_SIGMA:
            zz, yy = self._knots()
            out = np.interp(z, zz, yy)
            return np.exp(out, out=out)
        # ln x = y0 + s0 (z - z0) + (s1 - s0) max(z - z1, 0): a few in-place passes,
        # cheaper than np.interp's search per element on the 1M-sample hot path.
        hinge = None
        if len(slopes) == 2:
            hinge = np.subtract(z, self.z[1])
            np.maximum(hinge, 0.0, out=hinge)
            hinge *= slopes[1] - slopes[0]
        z *= slopes[0]
        z += self.log_ms[0] - slopes[0] * self.z[0]
        if hinge is not None:
            z += hinge
        return np.exp(z, out=z)

    def ppf(self, q: float) -> float:
        zz, yy = self._knots()
        return float(np.exp(np.interp(float(_ndtri(q)), zz, yy)))


_FAR = 40.0
MAX_TAIL_SIGMA = 2.0
"""Beyond the last stated percentile the tail grows at most as a lognormal of this sigma.
A jump of orders of magnitude between the last two points (p95 0.001 ms, p99 228 ms) is a
stage most requests never call, measured from a span table, not a tail growing that fast:
extended at its own slope it would put minutes at p99.9 and swamp every composition."""


def fit_stage(
    points: dict[str, float], *, default_sigma: float = 0.5
) -> Lognormal | SplicedLognormal:
    """The distribution of a stage from its given percentiles.

    One point: a lognormal with the documented default spread. Two or more: a
    spliced lognormal through every point (two points make it one lognormal).
    """
    if len(points) < 2:
        return fit_lognormal(points, default_sigma=default_sigma)
    ordered = sorted(points.items(), key=lambda kv: quantile_of(kv[0]))
    z = tuple(float(_ndtri(quantile_of(k))) for k, _ in ordered)
    log_ms = tuple(math.log(v) for _, v in ordered)
    return SplicedLognormal(z=z, log_ms=log_ms)


def fit_lognormal(points: dict[str, float], *, default_sigma: float = 0.5) -> Lognormal:
    """Fit a lognormal to {'p95': ms, ...} by least squares in log space.

    ln(x_q) = mu + sigma * z_q. With one point, sigma is `default_sigma`
    (stated in the output). Points that imply no spread (all equal) get a
    small floor so the stage still varies a little.
    """
    if not points:
        raise BudgetError("cannot fit a distribution without at least one percentile")
    zs = np.array([float(_ndtri(quantile_of(k))) for k in points])
    ys = np.log(np.array(list(points.values()), dtype=float))
    if len(points) == 1:
        sigma = default_sigma
        mu = float(ys[0] - sigma * zs[0])
        return Lognormal(mu=mu, sigma=sigma, points=1, default_spread=True)
    slope, intercept = np.polyfit(zs, ys, 1)
    sigma = max(float(slope), 1e-3)
    mu = float(np.mean(ys - sigma * zs)) if sigma != slope else float(intercept)
    return Lognormal(mu=mu, sigma=sigma, points=len(points))
