"""The budget file's `slo:` block: targets per metric at any percentile, goodput and
error rate; the flat p50/p95/p99 form means end-to-end. `Objectives.coerce(slo)` gives
the typed objectives (tailbudget.budget.objectives), as it does of every other shape."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tailbudget._units import Percentile, order_problem, parse_percentile
from tailbudget.budget.blocks import PercentileBlock
from tailbudget.budget.validation import describe
from tailbudget.errors import BudgetError, TailbudgetError

__all__ = ["SLO", "E2ETargets", "GoodputSpec", "Targets"]

Ms = Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*\Z")


class Targets(PercentileBlock):
    """Targets of one metric: {percentile: ms} for any percentile (`p90`, `p99.9`)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __pydantic_extra__: dict[str, Ms] = Field(init=False)
    NONE_GIVEN = "give at least one percentile target, e.g. p95: 1200 (milliseconds)"

    @model_validator(mode="before")
    @classmethod
    def _percentile_keys(cls, data: object) -> object:
        if isinstance(data, dict):
            fields = set(cls.model_fields)
            for key in data:
                if key not in fields:
                    _percentile_key(key)
        return data


class E2ETargets(Targets):
    """End-to-end targets; `output_tokens` makes them hold for an answer that long."""

    output_tokens: Annotated[int, Field(ge=1, strict=True)] | None = None


class GoodputSpec(BaseModel):
    """`goodput: {min: 0.95, ttft: 1200, tpot: 60}`: a minimum share and per-request thresholds."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __pydantic_extra__: dict[str, Ms] = Field(init=False)

    min: Annotated[float, Field(gt=0, le=1, strict=True)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _metric_keys(cls, data: object) -> object:
        if isinstance(data, dict):
            for key in data:
                if key != "min" and not (isinstance(key, str) and _NAME.match(key)):
                    raise ValueError(
                        f"{key!r} is not a metric; goodput takes min and thresholds in ms "
                        "for e2e, ttft, tpot, itl or a stage name"
                    )
        return data

    def thresholds(self) -> dict[str, float]:
        """Explicit per-request thresholds {metric: ms}."""
        return {k: float(v) for k, v in (self.__pydantic_extra__ or {}).items()}


_SLO_KEYS = ("e2e", "ttft", "tpot", "itl", "stages", "goodput", "error_rate")


class SLO(BaseModel):
    """The `slo:` block: objectives per metric (flat p50/p95/p99 keys mean end-to-end)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __pydantic_extra__: dict[str, Ms] = Field(init=False)

    e2e: E2ETargets | None = None
    ttft: Targets | None = None
    tpot: Targets | None = None
    itl: Targets | None = None
    stages: dict[str, Targets] = Field(default_factory=dict)
    goodput: GoodputSpec | None = None
    error_rate: Annotated[float, Field(ge=0, lt=1, strict=True)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: object) -> object:
        if isinstance(data, dict):
            for key in data:
                if key not in _SLO_KEYS and not Percentile.shaped(key):
                    raise ValueError(
                        f"unknown key {key!r}; objectives are {', '.join(_SLO_KEYS)} "
                        "or an end-to-end percentile such as p99"
                    )
                if Percentile.shaped(key):
                    _percentile_key(key)
        return data

    @model_validator(mode="after")
    def _some_objective(self) -> SLO:
        flat = _given(self.__pydantic_extra__ or {})
        if flat and self.e2e is not None:
            raise ValueError(
                "end-to-end targets are given both flat (slo.p99) and under slo.e2e; keep one"
            )
        _check_order(flat)
        for name in self.stages:
            if not _NAME.match(name):
                raise ValueError(f"stages: {name!r} is not a stage name")
        if not self.targets() and not (self.goodput and self.goodput.thresholds()):
            raise ValueError(
                "give at least one latency target, e.g. p99: 5200 or ttft: {p95: 1200} "
                "(milliseconds)"
            )
        return self

    def targets(self) -> dict[str, dict[str, float]]:
        """{metric: {percentile: ms}} for every metric with targets, e2e first."""
        out: dict[str, dict[str, float]] = {}
        e2e = self.given()
        if e2e:
            out["e2e"] = e2e
        for metric in ("ttft", "tpot", "itl"):
            block: Targets | None = getattr(self, metric)
            if block is not None:
                out[metric] = block.given()
        for name, block in self.stages.items():
            out[name] = block.given()
        return out

    def given(self) -> dict[str, float]:
        """End-to-end targets {percentile: ms}, lowest first (flat or under `e2e:`)."""
        if self.e2e is not None:
            return self.e2e.given()
        return _given(self.__pydantic_extra__ or {})

    @property
    def p50(self) -> float | None:
        """End-to-end p50 target (ms), if stated."""
        return self.given().get("p50")

    @property
    def p95(self) -> float | None:
        """End-to-end p95 target (ms), if stated."""
        return self.given().get("p95")

    @property
    def p99(self) -> float | None:
        """End-to-end p99 target (ms), if stated."""
        return self.given().get("p99")

    @classmethod
    def read(cls, data: Mapping[str, object]) -> SLO:
        """A budget file's `slo:` block given as a mapping (flat `{p99: 900}` or full
        `{ttft: {p95: 500}, goodput: {min: 0.95}}`), validated as a budget file's is; a
        one-line BudgetError naming the block's path (param `slo`) when it is invalid."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            what = describe(exc)
            where = "slo" if what.startswith("(top level)") else "slo."
            raise BudgetError(where + what.removeprefix("(top level)"), param="slo") from None


def _percentile_key(key: object) -> None:
    try:
        parse_percentile(str(key))
    except TailbudgetError:
        raise ValueError(
            f"{key!r} is not a percentile; write p and a number in (0, 100), e.g. p95 or p99.9"
        ) from None


def _given(raw: dict[str, float]) -> dict[str, float]:
    named: list[tuple[float, str, float]] = []
    for key, ms in raw.items():
        name, q = parse_percentile(key)
        named.append((q, name, float(ms)))
    return {name: ms for _, name, ms in sorted(named)}


def _check_order(given: dict[str, float]) -> None:
    problem = order_problem(given.items())
    if problem is not None:
        raise ValueError(problem)
