"""The ranges a service model's parameters may take, checked wherever a model comes from.

A model file is data from outside (`serve --model`, `/v1/model/refit`), and the options
of simulate and capacity state parameters too. A value outside these ranges does not
describe a service and drives the simulator into nonsense or no end: a `token_budget` of
0 prefills nothing, so every evaluation steps forever; a provision delay of 5e8 s sizes
the floor's schedule to it; NaN reads as "forecast in nan s". Each is refused at load
with its name and range, as a one-line TailbudgetError (CLI exit 2).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from tailbudget.errors import TailbudgetError

__all__ = ["RANGES", "Range", "check_number", "check_params"]

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Range:
    """lo <= value <= hi (lo excluded when `open_lo`), finite, whole when `whole`."""

    lo: float
    hi: float
    unit: str = ""
    open_lo: bool = False
    whole: bool = False

    def problem(self, value: float) -> str | None:
        """Why `value` is out of range, or None."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number, got {value!r}"
        if not math.isfinite(value):
            return f"must be a finite number, got {value!r}"
        low_bad = value <= self.lo if self.open_lo else value < self.lo
        if low_bad or value > self.hi:
            sign = ">" if self.open_lo else ">="
            unit = f" {self.unit}" if self.unit else ""
            return f"must be {sign} {self.lo:g} and <= {self.hi:g}{unit}, got {value:g}"
        if self.whole and value != int(value):
            return f"must be a whole number, got {value:g}"
        return None


RANGES: dict[str, Range] = {
    "concurrency": Range(1, 100_000, "requests", whole=True),
    "cold_factor": Range(1, 1_000, "x"),
    "cold_window_s": Range(0, DAY_S, "s"),
    "provision_delay_s": Range(0, DAY_S, "s"),
    "logging_overhead_ms": Range(0, 3_600_000, "ms"),
    "low_priority_share": Range(0, 1),
    "load_slope_ms_per_rps": Range(-1e6, 1e6, "ms per request/s"),
    "step_base_ms": Range(0, 60_000, "ms"),
    "step_per_seq_ms": Range(0, 60_000, "ms"),
    "prefill_step_ms": Range(0, 60_000, "ms"),
    "prefill_per_token_ms": Range(0, 1_000, "ms"),
    "fixed_ms": Range(-60_000, 3_600_000, "ms"),
    "fixed_per_token_ms": Range(-1_000, 1_000, "ms"),
    "batch_limit": Range(1, 1_000_000, "sequences", whole=True),
    "token_budget": Range(1, 100_000_000, "tokens", whole=True),
    "prefix_hit_rate": Range(0, 0.999, "share"),
    "ingest_ms": Range(0, 60_000, "ms"),
    "step_per_kv_ms": Range(0, 60_000, "ms per 1,000 tokens"),
    "prefix_cache_blocks": Range(1, 1_000_000_000, "blocks", whole=True),
}
"""Every parameter a model holds, by the name its file and JSON give it. The bounds are
far outside any service measured (a day's provisioning, a minute's decode step) and
inside what the simulator can run; a parameter not listed must be finite."""
_ANY = Range(-1e12, 1e12)


def check_number(name: str, value: float, param: str | None = None, what: str = "") -> float:
    """`value` when it is in `name`'s range, else a one-line TailbudgetError naming it."""
    problem = RANGES.get(name, _ANY).problem(value)
    if problem is not None:
        raise TailbudgetError(f"{what}{param or name} {problem}", param=param or name)
    return float(value)


def check_params(params: Iterable[tuple[str, float]], what: str, param: str) -> None:
    """Every (name, value) of a model in range; `what` says whose (e.g. the file)."""
    for name, value in params:
        problem = RANGES.get(name, _ANY).problem(value)
        if problem is not None:
            raise TailbudgetError(f"{what}: parameter {name} {problem}", param=param)
