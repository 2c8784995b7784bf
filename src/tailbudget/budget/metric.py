"""Metric names a policy rule may read: `p95`, `ttft.p95`, `e2e.p99.9`, `goodput`, ...

A name is one of:

- `pNN` or `e2e.pNN`: an end-to-end percentile (`p50`, `p99.9`);
- `ttft.pNN`, `tpot.pNN`, `itl.pNN`: an LLM percentile (time to first token,
  time per output token as vLLM defines it, every inter-token gap);
- `<stage>.pNN`: a pipeline stage's percentile, the stage named as its log names it;
- `error_rate`, `goodput` (the share of requests meeting every per-request threshold);
- `<any percentile above>_vs_baseline` (`p99_vs_baseline`, `ttft.p99_vs_baseline`) and
  `goodput_vs_baseline`: the value over the baseline's.

End-to-end names are written in their short form (`e2e.p95` is `p95`), so rules,
decisions and reports written before LLM objectives read the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailbudget._units import MetricKey, Percentile
from tailbudget.errors import PolicyError, TailbudgetError

__all__ = ["LLM_SERIES", "MetricRef", "parse_metric"]

LLM_SERIES: tuple[str, ...] = ("ttft", "tpot", "itl")
"""Per-request LLM series (each a latency in ms)."""

Kind = Literal["quantile", "error_rate", "goodput", "vs_baseline", "goodput_vs_baseline"]


@dataclass(frozen=True, slots=True)
class MetricRef:
    """A parsed metric name: which series, what statistic of it."""

    kind: Kind
    series: str = "e2e"
    """'e2e', 'ttft', 'tpot', 'itl' or a stage name ('' for error_rate and goodput)."""
    q: float | None = None
    """The quantile in (0, 1) for percentiles and percentile baselines."""

    @property
    def percentile(self) -> str:
        """'p95', 'p99.9' (empty for error_rate and goodput)."""
        if self.q is None:
            return ""
        return Percentile(self.q).name

    @property
    def name(self) -> str:
        """The canonical text (`p95`, `ttft.p95`, `goodput`, `ttft.p99_vs_baseline`)."""
        if self.kind in ("error_rate", "goodput", "goodput_vs_baseline"):
            return self.kind
        base = self.percentile if self.series == "e2e" else f"{self.series}.{self.percentile}"
        return base + ("_vs_baseline" if self.kind == "vs_baseline" else "")

    @property
    def latency(self) -> bool:
        """True when the value is milliseconds."""
        return self.kind == "quantile"

    @property
    def ratio_of_baseline(self) -> bool:
        """True for the `_vs_baseline` metrics."""
        return self.kind in ("vs_baseline", "goodput_vs_baseline")

    @property
    def higher_is_worse(self) -> bool:
        """False for goodput (a fall is the breach), True otherwise."""
        return self.kind not in ("goodput", "goodput_vs_baseline")


def _quantile(text: str, whole: str) -> float:
    try:
        return Percentile.parse(text).q
    except TailbudgetError:
        raise PolicyError(
            f"metric {whole!r}: a percentile is in (0, 100), e.g. p99 or p99.9"
        ) from None


def parse_metric(text: str) -> MetricRef:
    """Parse a metric name (see the module docstring); PolicyError naming it when bad."""
    if not isinstance(text, str) or not text.strip():
        raise PolicyError(
            f"metric must be a name like p95, ttft.p95, goodput or error_rate, got {text!r}"
        )
    raw = text.strip()
    if raw == "error_rate":
        return MetricRef("error_rate")
    if raw == "goodput":
        return MetricRef("goodput")
    if raw == "goodput_vs_baseline":
        return MetricRef("goodput_vs_baseline")
    vs = raw.endswith("_vs_baseline")
    body = raw.removesuffix("_vs_baseline")
    kind: Kind = "vs_baseline" if vs else "quantile"
    parts = MetricKey.split(body)
    # A rule's percentile has at most two whole digits: `p100` is no metric name here.
    if parts is not None and len(parts[1][1:].partition(".")[0]) <= 2:
        series, p = parts
        if series in ("error_rate", "goodput"):
            raise PolicyError(f"metric {raw!r}: {series} has no percentiles; write {series}")
        return MetricRef(kind, series or "e2e", _quantile(p, raw))
    raise PolicyError(
        f"metric {raw!r} is not a metric name; write p95, e2e.p99.9, ttft.p95, tpot.p99, "
        "itl.p99, <stage>.p99, goodput, error_rate or p99_vs_baseline"
    )
