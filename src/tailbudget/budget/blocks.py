"""The base of every block that states values by percentile: a stage's slice
(`Percentiles`), an objective's targets (`Targets`), a measured distribution (`Spread`)
and the audit report's SLO (`audit.report.Percentiles`). One reading of the stated
points, one check that there is one and that they do not fall."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

from tailbudget._units import Percentile, order_problem

__all__ = ["PercentileBlock"]


class PercentileBlock(BaseModel):
    """Values by percentile (fields named like `p95`, or extra keys where a block takes
    any percentile): at least one, non-decreasing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    NONE_GIVEN: ClassVar[str] = "give at least one percentile"
    """The refusal of a block that states no percentile."""
    CHECKED: ClassVar[bool] = True
    """False for a record of figures checked where they were read (the audit report's
    SLO, which may hold none): it states them as given."""
    UNIT: ClassVar[str] = " ms"
    """How the order check writes a value's unit."""

    @model_validator(mode="after")
    def _ordered(self) -> PercentileBlock:
        if not self.CHECKED:
            return self
        given = self.given()
        if not given:
            raise ValueError(self.NONE_GIVEN)
        problem = order_problem(given.items(), unit=self.UNIT)
        if problem is not None:
            raise ValueError(problem)
        return self

    def given(self) -> dict[str, float]:
        """The percentiles present, lowest first, as {canonical name: value} ('p99.9')."""
        stated = {k: getattr(self, k) for k in type(self).model_fields if Percentile.shaped(k)}
        stated.update(self.__pydantic_extra__ or {})
        named: list[tuple[float, str, float]] = []
        for key, value in stated.items():
            if value is not None:
                p = Percentile.parse(key)
                named.append((p.q, p.name, float(value)))
        return {name: value for _, name, value in sorted(named)}
