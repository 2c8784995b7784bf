"""Objectives per class: a tier, tenant or priority with its own SLO.

The budget file's `classes:` block names the column (span attribute, serve label) that
says which class a request belongs to, and per class its objectives and priority:

    classes:
      by: tier
      premium:  {slo: {p95: 800}, ttft: {p95: 300}, priority: 0}   # 0 = shed last
      standard: {slo: {p99: 1500}, priority: 1}

A class takes any objective `slo:` takes, in its `slo:` block or beside it (`ttft:`
above); a class that states none, and requests of classes not listed, fall under the
service-wide objectives. On the command line `--class-by COLUMN` and
`--slo premium:p95=800,standard:p99=1500` say the same (`split_class_slo`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tailbudget._units import Percentile
from tailbudget.budget.measured import MeasuredRequests
from tailbudget.budget.objectives import Objectives
from tailbudget.budget.slo import SLO
from tailbudget.errors import TailbudgetError

__all__ = [
    "CLASS_NAME",
    "OTHER",
    "ClassSet",
    "ClassSpec",
    "ClassesSpec",
    "ServiceClass",
    "class_set",
    "has_class_parts",
    "split_class_slo",
]

CLASS_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}\Z")
"""A class name: it becomes a Prometheus label value and a JSON key, so kept plain."""
OTHER = "other"
"""Where labels outside the budget's class list fold (serve, metrics): a reserved name."""
_SLO_KEYS = ("e2e", "ttft", "tpot", "itl", "stages", "goodput", "error_rate")
_BY = re.compile(r"^[^\x00-\x1f\x7f]{1,200}\Z")


class ClassSpec(BaseModel):
    """One class: its objectives (`slo:` and/or metric keys beside it), priority, skips."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slo: SLO | None = None
    priority: Annotated[int, Field(ge=0, le=1000, strict=True)] = 0
    """0 is shed last; `shed_load` sheds the highest number first."""
    skip: list[str] = Field(default_factory=list)
    """Stages this class's requests do not go through (batch skips rerank)."""
    measured: MeasuredRequests | None = None
    """What the class's own requests measured end to end (`init --from --class-by`
    writes it): plan composes the class from them, as `composition.measured` does the
    service, so a measured class plans at its own figures."""

    @model_validator(mode="before")
    @classmethod
    def _fold_objectives(cls, data: object) -> object:
        # `ttft: {p95: 300}` beside `slo:` is one more objective of the class's SLO.
        if not isinstance(data, dict):
            return data
        beside = {k: v for k, v in data.items() if k in _SLO_KEYS or _is_pct(k)}
        if not beside:
            return data
        slo = data.get("slo") or {}
        if not isinstance(slo, dict):
            return data
        both = sorted(set(beside) & set(slo))
        if both:
            raise ValueError(f"{both[0]} is given both in the class's slo: and beside it; keep one")
        rest = {k: v for k, v in data.items() if k not in beside}
        return {**rest, "slo": {**slo, **beside}}


def _is_pct(key: object) -> bool:
    return Percentile.shaped(key)


class ClassesSpec(BaseModel):
    """The `classes:` block: `by:` and one entry per class name."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __pydantic_extra__: dict[str, ClassSpec] = Field(init=False)

    by: Annotated[str, Field(min_length=1)]
    """The log column, span attribute or serve label holding each request's class."""

    @model_validator(mode="before")
    @classmethod
    def _names(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        names = [k for k in data if k != "by"]
        for name in names:
            if not isinstance(name, str) or not CLASS_NAME.match(name):
                raise ValueError(
                    f"class name {name!r}: use 1 to 63 letters, digits, _ . - (it becomes "
                    "a metrics label)"
                )
            if name == OTHER:
                raise ValueError(
                    f"class name {OTHER!r} is reserved for labels outside the class list; "
                    "rename the class"
                )
        if not names:
            raise ValueError(
                "classes: lists no class; add one, e.g. premium: {slo: {p95: 800}, priority: 0}"
            )
        by = data.get("by")
        if isinstance(by, str) and not _BY.match(by):
            raise ValueError(
                f"classes.by must be a column name without control characters, got {by!r}"
            )
        return data

    def specs(self) -> dict[str, ClassSpec]:
        """{class name: its spec}, in the file's order."""
        return dict(self.__pydantic_extra__ or {})


@dataclass(frozen=True, slots=True)
class ServiceClass:
    """A class as every command uses it: objectives (None: the service-wide ones)."""

    name: str
    objectives: Objectives | None = None
    priority: int = 0
    skip: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClassSet:
    """Which column holds the class, and each listed class."""

    by: str
    classes: tuple[ServiceClass, ...]

    def __post_init__(self) -> None:
        if not self.by or not _BY.match(self.by):
            raise TailbudgetError(
                f"class_by must be a column name, got {self.by!r}", param="class_by"
            )

    def names(self) -> tuple[str, ...]:
        """Listed class names, in order."""
        return tuple(c.name for c in self.classes)

    def get(self, name: str) -> ServiceClass | None:
        """The class called `name`, if listed."""
        return next((c for c in self.classes if c.name == name), None)

    def objectives_of(self, name: str, service: Objectives) -> Objectives:
        """The objectives a request of class `name` is judged by (the service's when the
        class is unlisted or states none)."""
        c = self.get(name)
        return service if c is None or c.objectives is None else c.objectives

    def shed_order(self) -> tuple[str, ...]:
        """Class names, the first to shed first (highest priority number; ties by name)."""
        ranked = sorted(self.classes, key=lambda c: (-c.priority, c.name))
        return tuple(c.name for c in ranked)

    def with_objectives(self, given: Mapping[str, Objectives]) -> ClassSet:
        """These classes with `given` objectives replacing (or adding) classes by name."""
        out = [replace(c, objectives=given[c.name]) if c.name in given else c for c in self.classes]
        known = set(self.names())
        lowest = max((c.priority for c in self.classes), default=-1)
        out += [
            ServiceClass(name, objs, priority=lowest + 1)
            for name, objs in given.items()
            if name not in known
        ]
        return replace(self, classes=tuple(out))


def class_set(spec: ClassesSpec, environment: str | None) -> ClassSet:
    """The typed class list of a `classes:` block, gated by the budget's environment."""
    classes = tuple(
        ServiceClass(
            name,
            None if s.slo is None else Objectives.coerce(s.slo, environment=environment),
            s.priority,
            tuple(s.skip),
        )
        for name, s in spec.specs().items()
    )
    return ClassSet(spec.by, classes)


def has_class_parts(slo: object) -> bool:
    """True when `slo` (a string or a {key: value} mapping) holds `CLASS:OBJECTIVE` parts."""
    if isinstance(slo, str):
        return ":" in slo
    return isinstance(slo, Mapping) and any(":" in str(k) for k in slo)


def split_class_slo(
    slo: str | Mapping[str, object], *, environment: str | None = None
) -> tuple[str | dict[str, object], dict[str, Objectives]]:
    """`p99=1500,premium:p95=800,premium:ttft.p95=300` -> ("p99=1500", {premium: ...}).

    The service-wide part keeps the shape it came in (the string's parts, or a mapping's
    keys) for `Objectives.coerce`; each class's part is read by `Objectives.coerce` too,
    as its own parts of the string or its own {key: value} mapping (a mapping is never
    joined into a string). A one-line error (param `slo`) on a bad class name."""
    if isinstance(slo, str):
        plain: list[str] = []
        per: dict[str, list[str]] = {}
        for raw in slo.split(","):
            part = raw.strip()
            if ":" not in part.partition("=")[0]:
                plain.append(part)
                continue
            name, _, rest = part.partition(":")
            per.setdefault(_class_name(name, part), []).append(rest)
        # Each class's own parts of the string, read once by the one reader.
        own = {name: ",".join(parts) for name, parts in per.items()}
        return ",".join(p for p in plain if p), _coerced(own, environment)
    service: dict[str, object] = {}
    by_class: dict[str, dict[str, object]] = {}
    for key, value in slo.items():
        if ":" not in str(key):
            service[key] = value
            continue
        name, _, rest = str(key).partition(":")
        part = f"{key}={value}".strip()
        by_class.setdefault(_class_name(name, part), {})[rest] = value
    return service, _coerced(by_class, environment)


def _class_name(name: str, part: str) -> str:
    name = name.strip()
    if not CLASS_NAME.match(name) or name == OTHER:
        raise TailbudgetError(
            f"slo {part!r}: {name!r} is not a class name; write CLASS:OBJECTIVE, e.g. "
            "premium:p95=800 (letters, digits, _ . -; 'other' is reserved)",
            param="slo",
        )
    return name


def _coerced(
    per: Mapping[str, str | Mapping[str, object]], environment: str | None
) -> dict[str, Objectives]:
    out: dict[str, Objectives] = {}
    for name, own in per.items():
        try:
            out[name] = Objectives.coerce(own, environment=environment)
        except TailbudgetError as exc:
            raise TailbudgetError(f"class {name}: {exc}", param="slo") from None
    return out
