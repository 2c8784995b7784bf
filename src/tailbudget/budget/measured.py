"""What a log's whole requests measured end to end (`composition.measured`, and a
class's `measured:`), beside the slices' additive sum then."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tailbudget._units import parse_percentile
from tailbudget.errors import TailbudgetError

__all__ = ["Counted", "MeasuredRequests"]

Ms = Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Counted(_Frozen):
    """One objective's verdict inputs on the log a budget was measured from: the verdict
    rule (tailbudget._verdict) needs the count over the target, not only the figure."""

    target: Ms
    """The target the count was taken against (a changed target is not counted)."""
    measured: Ms
    """The log's figure at the objective's percentile (a plan figure that moved from it,
    an edited slice, is the budget's, not the log's)."""
    over: Annotated[int, Field(ge=0, strict=True)]
    n: Annotated[int, Field(ge=1, strict=True)]


class MeasuredRequests(_Frozen):
    """What a log's whole requests measured end to end, beside the slices' sum then.

    `init --from` writes it where the log's requests call different subsets of the stages
    (span tables: most requests skip most operations). Stage distributions composed as if
    every request ran every stage overstate such a service's tail; its requests' own
    end-to-end figures do not. `plan` composes the current slices' sum scaled by what the
    requests measured against it (exactly the log's figures until a slice is edited)."""

    requests: Annotated[int, Field(ge=1, strict=True)]
    """How many requests the figures come from."""
    failed: Annotated[int, Field(ge=0, strict=True)] = 0
    """Requests of the log that errored or failed without a latency: never good, so the
    plan's goodput counts them as the audit does."""
    e2e: dict[str, Ms]
    """End-to-end ms per percentile (any percentile name: p50, p90, p99.9)."""
    slices: dict[str, Ms]
    """The slices' additive sum at the same percentiles when the log was measured."""
    counted: dict[str, Counted] = Field(default_factory=dict)
    """Per objective key (e2e.p99, ttft.p95, a stage's): the log's values over its target,
    so `plan` gives the verdict the audit gives (a breach proved on few requests)."""

    @model_validator(mode="after")
    def _same_percentiles(self) -> MeasuredRequests:
        for name in (*self.e2e, *self.slices):
            try:
                parse_percentile(name, where="composition.measured")
            except TailbudgetError as e:
                raise ValueError(str(e)) from None
        if set(self.e2e) != set(self.slices) or not self.e2e:
            raise ValueError(
                "composition.measured: e2e and slices must give the same percentiles, got "
                f"{sorted(self.e2e)} and {sorted(self.slices)}"
            )
        return self
