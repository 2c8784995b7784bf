"""The prefix-cache hit share at a load the fit did not see: between the fitted runs' shares.

Each fitted run has its own effective share of prompt tokens it did not compute
(refine.py): a warm prefix cache, and what a full batch gains over a lone prompt
(pipeline stages kept busy), which the lone prompts' TTFT slope does not show. Both
grow with load in a benchmark sweep (a later, busier run finds more of its prompts
cached), so a simulation takes the share at its own offered rate per replica:
linear in log(rate) between the two fitted runs around it, the nearest run's beyond
them. A burst (every request within a second) takes the fitted burst's share; a burst's
level sits at the rate the server took its requests in (requests / its last first
token), which is finite, so a paced rate between the busiest paced run and the burst is
interpolated too. A stated share (`prefix_hit_rate`) replaces all of this.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from tailbudget.sim.model import LLMParams

__all__ = ["HitLevel", "offered_rate", "share_at", "share_for"]

HitLevel = tuple[float, float, bool]
"""(requests/s a replica was offered, fitted hit share, the run was a burst)."""

_BURST_S = 1.0
"""Arrivals spread over less than this are a burst (as OwnRun.is_burst reads a log)."""


def offered_rate(t_s: npt.NDArray[np.float64], replicas: int) -> float:
    """Requests/s each replica is offered: the count over the arrivals' span, split over
    `replicas`; inf for a burst, 0 for one request (a lone prompt)."""
    n = int(t_s.size)
    if n < 2:
        return 0.0
    span = float(t_s.max() - t_s.min())
    if span < _BURST_S:
        return math.inf
    return n / span / max(replicas, 1)


def share_at(levels: Sequence[HitLevel], rate: float) -> float | None:
    """The hit share at `rate` requests/s a replica (inf: a burst); None without levels."""
    if not levels:
        return None
    bursts = [lv for lv in levels if lv[2]]
    if not math.isfinite(rate) and bursts:
        return float(np.mean([lv[1] for lv in bursts]))
    pts = sorted((lv[0], lv[1]) for lv in levels if lv[0] > 0 and math.isfinite(lv[0]))
    if not pts:
        return float(levels[0][1])
    if not math.isfinite(rate) or rate >= pts[-1][0]:
        return pts[-1][1]
    if rate <= pts[0][0]:
        return pts[0][1]
    x = [math.log(r) for r, _ in pts]
    return float(np.interp(math.log(rate), x, [s for _, s in pts]))


def share_for(p: LLMParams, t_s: npt.NDArray[np.float64], replicas: int) -> float:
    """The share a simulation of arrivals `t_s` on `replicas` uses: the stated or single
    fitted `prefix_hit_rate`, else the fitted runs' share at its offered rate."""
    if p.prefix_hit_rate.source == "stated" or not p.hit_levels:
        return p.prefix_hit_rate.value
    got = share_at(p.hit_levels, offered_rate(t_s, replicas))
    return p.prefix_hit_rate.value if got is None else got
