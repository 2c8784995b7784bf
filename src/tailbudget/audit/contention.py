"""Contention: a little more time in many operations of one stage, against the baseline.

For each operation key of a stage (a span's self time, or the gap of one of its
outgoing calls; logs/span_profile.py) the rank effect against the baseline's
sample, 2 x P(after > before) - 1 in [-1, 1] (Cliff's delta), normalises the
change by the operation's own spread: a 5 ms rise of a 2 ms-wide operation
counts as much as 500 ms of a 200 ms-wide one. A stage's contention is the mean
effect over its operations with samples on both sides; with fewer than
MIN_KEYS operations it is not judged (one slow call is not contention).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_KEYS", "MIN_SAMPLES", "Contention", "contention"]

MIN_SAMPLES = 2
"""Values needed on each side for an operation to be compared."""
MIN_KEYS = 2
"""Operations needed for a stage's contention figure."""


@dataclass(frozen=True)
class Contention:
    """A stage's mean rank effect over its operations, and how many rose."""

    effect: float
    keys: int
    rose: int


def _cliffs_delta(after: npt.NDArray[np.float64], before: npt.NDArray[np.float64]) -> float:
    b = np.sort(before)
    below = np.searchsorted(b, after, side="left")
    above = b.shape[0] - np.searchsorted(b, after, side="right")
    return float((below.sum() - above.sum()) / (after.shape[0] * b.shape[0]))


def contention(
    after: Mapping[tuple[str, str], Any] | None, before: Mapping[tuple[str, str], Any] | None
) -> dict[str, Contention]:
    """{stage: its contention} for stages with MIN_KEYS comparable operations."""
    if not after or not before:
        return {}
    effects: dict[str, list[float]] = {}
    for key, values in after.items():
        base = before.get(key)
        if base is None or len(values) < MIN_SAMPLES or len(base) < MIN_SAMPLES:
            continue
        effects.setdefault(key[0], []).append(_cliffs_delta(values, base))
    return {
        stage: Contention(float(np.mean(e)), len(e), sum(1 for x in e if x > 0.5))
        for stage, e in effects.items()
        if len(e) >= MIN_KEYS
    }
