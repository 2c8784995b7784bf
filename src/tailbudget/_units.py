"""Small parsers shared by every layer: durations, percentiles and metric keys.

`Percentile` and `MetricKey` are the one vocabulary of percentiles: every `p99.9` and
`ttft.p95` in tailbudget is read by `Percentile.parse` / `MetricKey.parse` and written by
their `name`, so a percentile reads and prints the same in every command."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from tailbudget.errors import TailbudgetError

PERCENTILES: tuple[str, ...] = ("p50", "p95", "p99")
"""The percentiles a budget speaks of, in order."""

_KEY = re.compile(r"(?:(?P<metric>.+)\.)?(?P<p>p\d+(?:\.\d+)?)")
"""The one pattern of percentile text: an optional metric (dots allowed) and `pNN`."""
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration_s(value: object, *, field: str = "duration", param: str | None = None) -> float:
    """Parse '2m', '30s', '1500ms', '1h' or a bare number of seconds into seconds (any
    other value, as read from a file, is refused naming `field`).

    `field` names the value in the message (a budget file's path, or an argument);
    `param` is the argument's name when a caller passed it (TailbudgetError.param)."""
    if isinstance(value, bool):
        raise TailbudgetError(
            f"{field}: must be a duration such as 30s or 2m, got {value!r}", param=param
        )
    if isinstance(value, int | float):
        if value < 0:
            raise TailbudgetError(f"{field}: must be a duration >= 0, got {value!r}", param=param)
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise TailbudgetError(
            f"{field}: must be a duration such as 30s, 2m or 1500ms, got {value!r}", param=param
        )
    return float(m.group(1)) * _FACTORS[m.group(2)]


@dataclass(frozen=True, slots=True, order=True)
class Percentile:
    """A percentile, ordered by its quantile: read once from `p99.9`, written once."""

    q: float
    """The quantile in (0, 1), rounded to 12 digits (`p99.9` is 0.999 wherever it is read;
    99.9 / 100 is not, in binary)."""

    def __post_init__(self) -> None:
        q = self.q
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0.0 < q < 1.0:
            raise TailbudgetError(f"a quantile is in (0, 1), got {q!r}")
        object.__setattr__(self, "q", round(float(q), 12))

    @classmethod
    def parse(cls, text: str, *, where: str = "percentile") -> Percentile:
        """'p99.9' -> Percentile(0.999); a one-line error naming `where` when it is not one."""
        m = _KEY.fullmatch(text.strip()) if isinstance(text, str) else None
        value = float(m.group("p")[1:]) if m and m.group("metric") is None else math.nan
        if not 0.0 < value < 100.0:
            raise TailbudgetError(
                f"{where}: {text!r} is not a percentile; write p and a number in (0, 100), "
                "e.g. p50, p95 or p99.9"
            )
        return cls(value / 100.0)

    @staticmethod
    def shaped(text: object) -> bool:
        """True for text written like a percentile (`p` then digits and dots), valid or not:
        a key a budget file means as a percentile, to be refused by `parse` when bad."""
        return (
            isinstance(text, str)
            and text[:1] == "p"
            and len(text) > 1
            and all(c in "0123456789." for c in text[1:])
        )

    @property
    def name(self) -> str:
        """'p95', 'p99.9' (no trailing zeros): the one spelling of a percentile."""
        return f"p{round(100.0 * self.q, 9):g}"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class MetricKey:
    """A metric at a percentile: `ttft.p95`, `e2e.p99`, `retrieval.p99.9`."""

    metric: str
    """'e2e', 'ttft', 'tpot', 'itl' or a stage name (the name is not checked here)."""
    percentile: Percentile

    @staticmethod
    def split(text: str) -> tuple[str | None, str] | None:
        """'ttft.p95' -> ('ttft', 'p95'), 'p95' -> (None, 'p95'), not yet checked as a
        percentile; None when the text does not end in `.pNN`."""
        m = _KEY.fullmatch(text) if isinstance(text, str) else None
        return None if m is None else (m.group("metric"), m.group("p"))

    @classmethod
    def parse(cls, text: str, *, where: str | None = None) -> MetricKey:
        """'ttft.p95' -> MetricKey('ttft', p95); a bare 'p95' is end-to-end."""
        parts = cls.split(text)
        if parts is None:
            raise TailbudgetError(
                f"{where or 'metric'}: {text!r} is not a metric at a percentile; write "
                "METRIC.pNN, e.g. ttft.p95 or e2e.p99.9"
            )
        metric, p = parts
        return cls(metric or "e2e", Percentile.parse(p, where=where or text))

    @property
    def name(self) -> str:
        """'ttft.p95', 'e2e.p99': metric first, as the SLO string writes it."""
        return f"{self.metric}.{self.percentile.name}"

    def __str__(self) -> str:
        return self.name


def parse_percentile(name: str, *, where: str = "percentile") -> tuple[str, float]:
    """'p99.9' -> ('p99.9', 0.999): `Percentile.parse` as (canonical name, quantile).

    The canonical name drops trailing zeros ('p90.0' -> 'p90')."""
    p = Percentile.parse(name, where=where)
    return p.name, p.q


def percentile_name(q: float) -> str:
    """0.999 -> 'p99.9': the one q -> name formatter (`Percentile.name`)."""
    return Percentile(q).name


def order_problem(values: Iterable[tuple[str, float]], unit: str = " ms") -> str | None:
    """The one ordering check of percentile values, listed lowest percentile first: None
    when none is below the one before it, else the message naming the pair."""
    for (lo_name, lo), (hi_name, hi) in itertools.pairwise(values):
        if hi < lo:
            return (
                f"{hi_name} ({hi:,.6g}{unit}) is below {lo_name} ({lo:,.6g}{unit}); "
                "a higher percentile must not be lower"
            )
    return None


def quantile_of(name: str) -> float:
    """'p99' -> 0.99, 'p99.9' -> 0.999, 'p50' -> 0.5."""
    return parse_percentile(name)[1]


def min_rows(percentile: str) -> int:
    """Fewest values for a verdict on `percentile`: one beyond it on average (100 for p99).

    The audit's rule; every command that judges a measured figure (plan, rebudget, init,
    simulate) asks this function, so a thin percentile is inconclusive everywhere."""
    q = quantile_of(percentile)
    return math.ceil(1.0 / (1.0 - q) - 1e-9)
