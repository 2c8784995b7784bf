"""An LLM stage's `llm:` block: TTFT, TPOT and ITL as distributions, and answer lengths.

The single-number form (`ttft_ms`, `tokens_per_s`, `output_tokens`) states medians and
stays valid. The distribution form is what `init --from` writes: each metric's measured
p50/p95/p99, with the audit's definitions (TPOT = (e2e - ttft) / (output_tokens - 1),
ITL = every inter-token gap), so `plan` reads each objective at its own percentile
instead of stretching one median rate across them.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tailbudget._units import quantile_of
from tailbudget.budget.blocks import PercentileBlock
from tailbudget.budget.distributions import fit_stage

Ms = Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]
NonNeg = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]
FLOOR_MS = 0.001
"""A zero percentile (ITL gaps of tokens sent together) fits as this, for the log-space fit."""


SPREAD_POINTS: tuple[str, ...] = ("p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99")
"""The percentiles a distribution may state; `init --from` writes them all, so a goodput
threshold below the median (a request's longest gap) reads the lower tail too."""


class Spread(PercentileBlock):
    """A metric's percentiles (any of SPREAD_POINTS; at least one, non-decreasing, >= 0),
    and optionally the count `n` they were measured on."""

    NONE_GIVEN = f"give at least one of {', '.join(SPREAD_POINTS)}"
    UNIT = ""

    n: Annotated[int, Field(ge=1, strict=True)] | None = None
    """How many values the percentiles were measured on (`init --from` writes it): a
    percentile with fewer than the audit needs for a verdict (100 for p99) is
    inconclusive in `plan` as in the audit."""
    p1: NonNeg | None = None
    p5: NonNeg | None = None
    p10: NonNeg | None = None
    p25: NonNeg | None = None
    p50: NonNeg | None = None
    p75: NonNeg | None = None
    p90: NonNeg | None = None
    p95: NonNeg | None = None
    p99: NonNeg | None = None

    def at(self, percentile: str) -> float:
        """The value at `percentile`: as stated, else from a spliced lognormal through the
        stated points (one point alone: its value, the block states no spread)."""
        given = self.given()
        if percentile in given:
            return given[percentile]
        if len(given) == 1:
            return next(iter(given.values()))
        points = {p: max(v, FLOOR_MS) for p, v in given.items()}
        return float(fit_stage(points).ppf(quantile_of(percentile)))


class LLMSpec(BaseModel):
    """Time of an LLM call: prefill (TTFT), decode (tokens x TPOT), and a tail allowance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_ms: Ms
    """Median TTFT (from `ttft.p50` when only the distribution is given)."""
    tokens_per_s: Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]
    """Median decode rate (1000 / `tpot.p50` when only the distribution is given)."""
    output_tokens: Annotated[int, Field(gt=0, strict=True)] | Spread
    tail_ms: Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)] = 0.0
    ttft: Spread | None = None
    tpot: Spread | None = None
    itl: Spread | None = None
    longest_gap: Spread | None = None
    """Each request's largest inter-token gap: what a goodput ITL threshold is checked on."""
    prefix_hit_rate: (
        Annotated[float, Field(ge=0, lt=1, strict=True, allow_inf_nan=False)] | None
    ) = None
    """Share of prompt tokens the server's prefix cache serves: simulate and capacity
    charge a step only the rest (else the share fitted from the logs)."""

    @model_validator(mode="before")
    @classmethod
    def _medians(cls, data: object) -> object:
        # The distribution form states medians too: the scalar fields follow from them.
        if not isinstance(data, dict):
            return data
        out = dict(data)
        ttft, tpot = out.get("ttft"), out.get("tpot")
        if "ttft_ms" not in out and isinstance(ttft, dict) and _positive(ttft.get("p50")):
            out["ttft_ms"] = float(ttft["p50"])
        if "tokens_per_s" not in out and isinstance(tpot, dict) and _positive(tpot.get("p50")):
            out["tokens_per_s"] = 1000.0 / float(tpot["p50"])
        return out

    @property
    def median_tokens(self) -> int:
        """The median answer length in tokens."""
        if isinstance(self.output_tokens, int):
            return self.output_tokens
        return max(1, round(self.output_tokens.at("p50")))

    @property
    def decode_ms(self) -> float:
        """Decode time: the median answer at the median rate."""
        return self.median_tokens / self.tokens_per_s * 1000.0

    @property
    def total_ms(self) -> float:
        """TTFT + decode + tail."""
        return self.ttft_ms + self.decode_ms + self.tail_ms

    @property
    def dominant(self) -> Literal["decode", "prefill"]:
        """Which slice dominates the call's time."""
        return "decode" if self.decode_ms >= self.ttft_ms else "prefill"

    def ttft_at(self, percentile: str) -> float:
        """TTFT at a percentile: the stated distribution, else the median at every one."""
        return self.ttft.at(percentile) if self.ttft is not None else self.ttft_ms

    def tpot_at(self, percentile: str) -> float:
        """TPOT at a percentile: the stated distribution, else 1000 / tokens_per_s."""
        return self.tpot.at(percentile) if self.tpot is not None else 1000.0 / self.tokens_per_s

    def itl_at(self, percentile: str) -> float | None:
        """ITL at a percentile when the block states its distribution."""
        return self.itl.at(percentile) if self.itl is not None else None

    def as_written(self) -> dict[str, Any]:
        """The block as a file states it: the distributions in the order `init --from`
        writes them, and a median field only when it says more than its distribution's p50
        (a rewritten file keeps the form it was written in, not the medians derived from it).
        """
        data = self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        if self.ttft is not None and self.ttft.p50 == self.ttft_ms:
            data.pop("ttft_ms", None)
        p50 = self.tpot.p50 if self.tpot is not None else None
        if p50 is not None and p50 > 0 and math.isclose(1000.0 / p50, self.tokens_per_s):
            data.pop("tokens_per_s", None)
        first = [k for k in (*_WRITTEN_ORDER, *data) if k in data]
        return {k: data[k] for k in dict.fromkeys(first)}


_WRITTEN_ORDER = ("ttft_ms", "tokens_per_s", "ttft", "tpot", "itl", "longest_gap", "output_tokens")
"""Key order of a written block: `init --from`'s for the distribution form."""


def _positive(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0
