"""Objectives: which latency metric must stay under which target at which percentile.

One typed, frozen model shared by plan, audit, policy, simulate and rebudget. An
objective names a metric (`e2e`, `ttft`, `tpot`, `itl` or a stage by name), a
percentile (`p95`, `p99.9`: `p` and a number in (0, 100)) and a target in ms;
`gated` says whether a breach fails a release gate. Goodput is the share of
requests that are not errors and meet every per-request threshold.

`parse_objectives` reads the SLO string grammar (`p99=900,ttft.p95=500,goodput=0.95`);
`Objectives.coerce` is the one conversion of every shape an SLO is given in (the string,
a mapping of it, a budget file's `slo:` block, Objectives).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeAlias

from tailbudget._units import MetricKey, order_problem, parse_percentile
from tailbudget.budget.slo import SLO
from tailbudget.errors import TailbudgetError

__all__ = [
    "GATES",
    "LLM_METRICS",
    "METRICS",
    "Goodput",
    "Objective",
    "Objectives",
    "SloLike",
    "describe_all",
    "from_targets",
    "parse_objectives",
    "parse_percentile",
]

GATES: dict[str, tuple[str, ...]] = {
    "dev": ("p50",),
    "qa": ("p95",),
    "uat": ("p95", "p99"),
    "prd": ("p99",),
}
"""Which percentiles gate a release in each environment (the reactive-scaling table)."""

LLM_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl")
"""Per-request metrics of a streamed LLM answer."""
METRICS: tuple[str, ...] = ("e2e", *LLM_METRICS)
"""Metrics with a fixed meaning; any other name is a stage."""

_STAGE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*\Z")
SloLike: TypeAlias = "str | Mapping[str, object] | SLO | Objectives"
"""What an SLO may be given as (`Objectives.coerce`): the string grammar (`p99=900,ttft.p95=
500`), a {key: value} mapping of it, a budget file's `slo:` block (`{"ttft": {"p95": 500}}`,
or its model `SLO`), or Objectives."""
_GRAMMAR = (
    "write objectives as p99=900, e2e.p99.9=20000, ttft.p95=500, tpot.p99=60, itl.p99=150, "
    "STAGE.p99=800, goodput=0.95, goodput.ttft=1200 or error_rate=0.01"
)


@dataclass(frozen=True, slots=True)
class Objective:
    """One objective: `metric` at `percentile` must be at most `target_ms`."""

    metric: str
    """e2e | ttft | tpot | itl | a stage name."""
    percentile: str
    """Canonical percentile name: 'p95', 'p99.9'."""
    target_ms: float
    gated: bool = True
    """A breach fails the release gate (plan exit 1, an audit's fail-on-breach gate)."""
    output_tokens: int | None = None
    """e2e only: the target holds for an answer this long (ttft + (N - 1) x tpot)."""

    def __post_init__(self) -> None:
        name, _ = parse_percentile(self.percentile, where=f"{self.metric} objective")
        if name != self.percentile:
            object.__setattr__(self, "percentile", name)
        if not isinstance(self.target_ms, int | float) or not (
            math.isfinite(self.target_ms) and self.target_ms > 0
        ):
            raise TailbudgetError(
                f"{self.key}: target must be a finite positive number of ms, got {self.target_ms!r}"
            )
        if self.metric not in METRICS and not _STAGE.match(self.metric):
            raise TailbudgetError(
                f"{self.metric!r} is not a metric: use e2e, ttft, tpot, itl or a stage name "
                "(letters, digits, _ . / -)"
            )
        if self.output_tokens is not None and (
            self.metric != "e2e" or isinstance(self.output_tokens, bool) or self.output_tokens < 1
        ):
            raise TailbudgetError(
                f"{self.key}: output_tokens applies to e2e objectives only and must be a "
                f"whole number >= 1, got {self.output_tokens!r}"
            )

    @property
    def q(self) -> float:
        """The percentile as a quantile: p99.9 -> 0.999."""
        return parse_percentile(self.percentile)[1]

    @property
    def key(self) -> str:
        """'ttft.p95', 'e2e.p99', 'retrieval.p99' (the SLO string's spelling, metric first)."""
        return f"{self.metric}.{self.percentile}"

    @property
    def is_stage(self) -> bool:
        """True when the metric is a stage of the pipeline, not e2e/ttft/tpot/itl."""
        return self.metric not in METRICS

    def describe(self) -> str:
        """'ttft p95 <= 1,200 ms' (with 'for a 2,000-token answer' on e2e at N tokens)."""
        text = f"{self.metric} {self.percentile} <= {self.target_ms:,.6g} ms"
        if self.output_tokens is not None:
            text += f" for a {self.output_tokens:,}-token answer"
        return text


@dataclass(frozen=True, slots=True)
class Goodput:
    """Goodput objective: at least `min` of requests good (None: report, do not gate).

    `thresholds` are the explicit per-request thresholds {metric: ms}; a metric with
    objectives but no explicit threshold adds its target at its highest percentile
    (see `Objectives.thresholds`)."""

    min: float | None = None
    thresholds: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.min is not None and (
            isinstance(self.min, bool)
            or not (isinstance(self.min, int | float))
            or not 0.0 < self.min <= 1.0
        ):
            raise TailbudgetError(
                f"goodput: the minimum share must be in (0, 1], e.g. goodput=0.95, got {self.min!r}"
            )
        for metric, ms in self.thresholds.items():
            if metric not in METRICS and not _STAGE.match(metric):
                raise TailbudgetError(
                    f"goodput.{metric}: not a metric; use e2e, ttft, tpot, itl or a stage name"
                )
            if (
                isinstance(ms, bool)
                or not isinstance(ms, int | float)
                or not (math.isfinite(ms) and ms > 0)
            ):
                raise TailbudgetError(
                    f"goodput.{metric}: threshold must be a finite positive number of ms, "
                    f"got {ms!r}"
                )
        object.__setattr__(self, "thresholds", {k: float(v) for k, v in self.thresholds.items()})


@dataclass(frozen=True, slots=True)
class Objectives:
    """Every objective of a budget or an SLO string, with goodput and error rate."""

    items: tuple[Objective, ...] = ()
    goodput: Goodput | None = None
    error_rate: float | None = None
    environment: str | None = None
    """The environment whose gates set `Objective.gated`; None: every objective gates."""

    def __post_init__(self) -> None:
        items = tuple(sorted(self.items, key=lambda o: (_metric_order(o.metric), o.q)))
        object.__setattr__(self, "items", items)
        seen: dict[str, Objective] = {}
        for o in items:
            if o.key in seen:
                raise TailbudgetError(f"{o.key} is given twice; give each objective once")
            seen[o.key] = o
        for metric in self.metrics():
            _check_order([o for o in items if o.metric == metric])
        tokens = {o.output_tokens for o in items if o.metric == "e2e"}
        if len(tokens) > 1:
            raise TailbudgetError(
                "e2e objectives state different output_tokens; one answer length per e2e block"
            )
        if self.error_rate is not None and (
            isinstance(self.error_rate, bool)
            or not isinstance(self.error_rate, int | float)
            or not 0.0 <= self.error_rate < 1.0
        ):
            raise TailbudgetError(
                "error_rate must be a share in [0, 1), e.g. error_rate=0.01, "
                f"got {self.error_rate!r}"
            )
        if self.environment is not None and self.environment not in GATES:
            raise TailbudgetError(
                f"environment must be one of {', '.join(GATES)}, got {self.environment!r}"
            )

    @classmethod
    def coerce(cls, slo: SloLike, *, environment: str | None = None) -> Objectives:
        """`slo` as Objectives, the one conversion: the SLO string grammar, a {key: value}
        mapping of it, a budget file's `slo:` block (a mapping in its full form or `SLO`),
        or Objectives (regated when `environment` is given). A one-line error (param `slo`)
        when it is none of them or is invalid."""
        if isinstance(slo, Objectives):
            return slo if environment is None else slo.with_environment(environment)
        if isinstance(slo, Mapping) and any(isinstance(v, Mapping) for v in slo.values()):
            slo = SLO.read(slo)  # a budget file's full form
        if isinstance(slo, SLO):
            return _of_block(slo, environment)
        if isinstance(slo, Mapping):
            pairs = ((str(k).strip(), str(v).strip()) for k, v in slo.items())
            return _parsed(lambda: _objectives_of(pairs), environment)
        if not isinstance(slo, str):
            raise TailbudgetError(
                f"slo must be a string such as 'p99=900', a mapping or Objectives, "
                f"got a {type(slo).__name__}",
                param="slo",
            )
        return parse_objectives(slo, environment=environment)

    def __iter__(self) -> Iterator[Objective]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def gated(self) -> tuple[Objective, ...]:
        """The objectives whose breach fails a gate."""
        return tuple(o for o in self.items if o.gated)

    def of(self, metric: str) -> tuple[Objective, ...]:
        """The objectives of one metric, lowest percentile first."""
        return tuple(o for o in self.items if o.metric == metric)

    def metrics(self) -> tuple[str, ...]:
        """Metrics with at least one objective, e2e/ttft/tpot/itl first, then stages."""
        return tuple(dict.fromkeys(o.metric for o in self.items))

    def stages(self) -> tuple[str, ...]:
        """Stage names that objectives or goodput thresholds refer to."""
        names = [o.metric for o in self.items if o.is_stage]
        if self.goodput is not None:
            names += [m for m in self.goodput.thresholds if m not in METRICS]
        return tuple(dict.fromkeys(names))

    def e2e(self) -> dict[str, float]:
        """End-to-end targets {percentile: ms}, lowest percentile first (the flat `slo:`)."""
        return {o.percentile: o.target_ms for o in self.of("e2e")}

    def e2e_output_tokens(self) -> int | None:
        """The answer length the e2e objectives hold for, if stated."""
        return next((o.output_tokens for o in self.of("e2e") if o.output_tokens), None)

    def thresholds(self) -> dict[str, float]:
        """Per-request goodput thresholds {metric: ms}: explicit ones, then for every other
        metric with objectives its target at its highest stated percentile."""
        out = dict(self.goodput.thresholds) if self.goodput is not None else {}
        for metric in self.metrics():
            if metric not in out:
                out[metric] = self.of(metric)[-1].target_ms
        return out

    def gated_percentiles(self, metric: str = "e2e") -> tuple[str, ...]:
        """Names of the gated percentiles of one metric (e.g. ('p95', 'p99'))."""
        return tuple(o.percentile for o in self.of(metric) if o.gated)

    def with_environment(self, environment: str | None) -> Objectives:
        """The same objectives gated by `environment` (None: every objective gates)."""
        gates = None if environment is None else _gates(environment)
        items = tuple(replace(o, gated=gates is None or o.percentile in gates) for o in self.items)
        return replace(self, items=items, environment=environment)

    def check_stages(self, known: Collection[str], *, source: str = "the log") -> None:
        """Raise when an objective names a stage that `known` does not hold."""
        for name in self.stages():
            if name not in known:
                have = ", ".join(sorted(known)) or "none"
                raise TailbudgetError(
                    f"objective on {name!r}: not a metric (e2e, ttft, tpot, itl) and {source} "
                    f"has no such stage (stages: {have}); fix the name or map its column "
                    "with stages"
                )


def _gates(environment: str) -> tuple[str, ...]:
    if environment not in GATES:
        raise TailbudgetError(f"environment must be one of {', '.join(GATES)}, got {environment!r}")
    return GATES[environment]


def _metric_order(metric: str) -> int:
    return METRICS.index(metric) if metric in METRICS else len(METRICS)


def _check_order(objectives: list[Objective]) -> None:
    problem = order_problem((o.key, o.target_ms) for o in objectives)
    if problem is not None:
        raise TailbudgetError(problem)


def _number(key: str, text: str, unit: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TailbudgetError(f"slo {key} must be a finite number{unit}, got {text.strip()!r}")
    return value


def _ms(key: str, text: str) -> float:
    value = _number(key, text, " of ms")
    if not value > 0:
        raise TailbudgetError(f"slo {key} must be a positive number of ms, got {text.strip()!r}")
    return value


def parse_objectives(text: str, *, environment: str | None = None) -> Objectives:
    """Read the SLO string grammar into Objectives; a one-line error (param `slo`) on bad text.

    `p99=900` is end-to-end; `METRIC.pNN=ms` for e2e, ttft, tpot, itl or a stage;
    `e2e.output_tokens=N`; `goodput=SHARE`, `goodput.METRIC=ms`; `error_rate=SHARE`.
    """
    return _parsed(lambda: _objectives_of(_pairs(text)), environment)


def _parsed(read: Callable[[], Objectives], environment: str | None) -> Objectives:
    try:
        out = read()
    except TailbudgetError as exc:
        raise TailbudgetError(str(exc), param="slo") from None
    return out.with_environment(environment)


def _pairs(text: str) -> Iterator[tuple[str, str]]:
    for raw in text.split(","):
        part = raw.strip()
        if part:
            key, sep, value = (s.strip() for s in part.partition("="))
            if not sep or not key or not value:
                raise TailbudgetError(f"slo: {part!r} is not NAME=VALUE; {_GRAMMAR}")
            yield key, value


def _of_block(block: SLO, environment: str | None) -> Objectives:
    goodput = None
    if block.goodput is not None:
        goodput = Goodput(block.goodput.min, block.goodput.thresholds())
    return from_targets(
        block.targets(),
        goodput=goodput,
        error_rate=block.error_rate,
        output_tokens=block.e2e.output_tokens if block.e2e is not None else None,
        environment=environment,
    )


def _objectives_of(pairs: Iterable[tuple[str, str]]) -> Objectives:
    """The grammar's NAME=VALUE pairs (from the string, or a mapping's items) read."""
    items: list[Objective] = []
    share: float | None = None
    thresholds: dict[str, float] = {}
    error_rate: float | None = None
    tokens: int | None = None
    for key, value in pairs:
        if not key or not value:
            raise TailbudgetError(f"slo: {f'{key}={value}'!r} is not NAME=VALUE; {_GRAMMAR}")
        if key == "error_rate":
            error_rate = _number(key, value, " in [0, 1)")
        elif key == "goodput":
            share = _number(key, value, " in (0, 1]")
        elif key.startswith("goodput."):
            thresholds[key.removeprefix("goodput.")] = _ms(key, value)
        elif key == "e2e.output_tokens":
            number = _number(key, value, " of tokens")
            if not (number >= 1 and number.is_integer()):
                raise TailbudgetError(f"slo {key} must be a whole number >= 1, got {value!r}")
            tokens = int(number)
        else:
            items.append(_objective(key, value))
    if tokens is not None:
        if not any(o.metric == "e2e" for o in items):
            raise TailbudgetError("slo e2e.output_tokens needs an e2e objective, e.g. e2e.p95=6000")
        items = [replace(o, output_tokens=tokens) if o.metric == "e2e" else o for o in items]
    if not items and share is None and error_rate is None and not thresholds:
        raise TailbudgetError(f"slo is empty: {_GRAMMAR}")
    try:
        goodput = Goodput(share, thresholds) if share is not None or thresholds else None
        return Objectives(tuple(items), goodput, error_rate)
    except TailbudgetError as exc:
        raise TailbudgetError(f"slo {exc}") from None


def _objective(key: str, value: str) -> Objective:
    parts = MetricKey.split(key)
    if parts is None:
        metric, _, tail = key.rpartition(".")
        if metric and tail.startswith("p"):
            parse_percentile(tail, where=f"slo {key}")
        raise TailbudgetError(f"slo: {key!r} is not an objective; {_GRAMMAR}")
    metric = parts[0] or "e2e"
    name, _ = parse_percentile(parts[1], where=f"slo {key}")
    if metric not in METRICS and not _STAGE.match(metric):
        raise TailbudgetError(
            f"slo {key}: {metric!r} is not a metric; use e2e, ttft, tpot, itl or a stage name"
        )
    return Objective(metric, name, _ms(key, value))


def from_targets(
    targets: Mapping[str, Mapping[str, float]],
    *,
    goodput: Goodput | None = None,
    error_rate: float | None = None,
    output_tokens: int | None = None,
    environment: str | None = None,
) -> Objectives:
    """Objectives from {metric: {percentile: ms}} (the budget file's `slo:` once validated)."""
    items = [
        Objective(metric, p, float(ms), output_tokens=output_tokens if metric == "e2e" else None)
        for metric, by_p in targets.items()
        for p, ms in by_p.items()
    ]
    return Objectives(tuple(items), goodput, error_rate).with_environment(environment)


def describe_all(objectives: Iterable[Objective]) -> str:
    """'ttft p95 <= 1,200 ms; tpot p95 <= 40 ms' for messages."""
    return "; ".join(o.describe() for o in objectives)
