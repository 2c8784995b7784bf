"""What one simulation run produced: per-request outcomes and the fleet over time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tailbudget.control.decision import Decision
from tailbudget.sim.fleet import Knobs, TickView

__all__ = ["Arrivals", "RunPolicy", "SimTrace", "TickRecord"]


class RunPolicy(Protocol):
    """A scaling policy in the loop: evaluated every `every_s` on what the service did."""

    name: str
    every_s: float

    def tick(self, view: TickView, knobs: Knobs) -> list[Decision]:
        """Update `knobs` in place from `view`; return the decisions taken."""
        ...


@dataclass(frozen=True)
class Arrivals:
    """Arrival times (s, sorted), the log request each copies, and its priority."""

    t_s: npt.NDArray[np.float64]
    src: npt.NDArray[np.int64]
    low_priority: npt.NDArray[np.bool_]
    input_tokens: npt.NDArray[np.float64] | None = None
    """Prompt sizes from a trace (replacing the copied request's, when given)."""
    output_tokens: npt.NDArray[np.float64] | None = None
    description: str = ""
    classes: npt.NDArray[np.str_] | None = None
    """Each arrival's class from the arrival trace (None: each keeps its copied request's)."""
    blocks: tuple[tuple[int, ...], ...] | None = None
    """Each prompt's KV-cache block hashes (a Mooncake trace): hits come from an LRU of
    blocks per replica, not from the model's prefix_hit_rate."""
    class_code: npt.NDArray[np.int64] | None = None
    """With listed classes: each arrival's class as its place in the shedding order (1 =
    the class shed first; 0 = a class the budget does not list, never shed). What the
    engines shed by (`Knobs.shed_codes`) and what a policy's view says of each finished
    request (`TickView.done_class`). None: `low_priority` alone (code 1 when True)."""

    def shed_codes(self) -> npt.NDArray[np.int64]:
        """The code the engines shed each arrival by (`class_code`, else `low_priority`)."""
        if self.class_code is not None:
            return self.class_code
        return self.low_priority.astype(np.int64)

    @property
    def size(self) -> int:
        """Number of arrivals."""
        return int(self.t_s.size)


@dataclass(frozen=True)
class TickRecord:
    """The fleet at one policy evaluation."""

    t_s: float
    ready: int
    alive: int
    shed: bool
    trim: bool


@dataclass(frozen=True)
class SimTrace:
    """Outcomes of one run; `done_s` is NaN for shed requests and those still in flight."""

    arrival_s: npt.NDArray[np.float64]
    done_s: npt.NDArray[np.float64]
    ttft_s: npt.NDArray[np.float64] | None
    """First-token time (absolute, s), LLM model only."""
    src: npt.NDArray[np.int64]
    shed: npt.NDArray[np.bool_]
    error: npt.NDArray[np.bool_]
    output_tokens: npt.NDArray[np.float64] | None
    ticks: list[TickRecord] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    replica_s: float = 0.0
    end_s: float = 0.0
    cold_starts: int = 0
    step_ms: npt.NDArray[np.float64] | None = None
    """Each step's time (LLM engine, when asked): the inter-token gap of every sequence
    decoding in it."""
    step_seqs: npt.NDArray[np.float64] | None = None
    """Sequences decoding in each step (how many gaps of `step_ms` it produced)."""
    prefix_hits: float | None = None
    """Share of prompt tokens served by the replicas' block LRUs (arrivals with blocks)."""

    @property
    def e2e_ms(self) -> npt.NDArray[np.float64]:
        """End-to-end time of every request (NaN when not served)."""
        return (self.done_s - self.arrival_s) * 1000.0
