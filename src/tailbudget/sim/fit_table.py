"""The fit table: every fitted run, every figure, predicted on its own arrivals vs measured.

A model reproduces its data when every median is within 10% and every tail within
20% (DESIGN.md, "Service model"); one that does not gives no policy verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailbudget.sim.records import FitRowRecord

__all__ = ["FitRow", "FitTable", "bound_of"]

MEDIAN_BOUND = 0.10
TAIL_BOUND = 0.20


def bound_of(figure: str) -> float:
    """The relative error a figure may have: 10% on a median, 20% on a tail."""
    return MEDIAN_BOUND if figure.endswith(".p50") else TAIL_BOUND


@dataclass(frozen=True)
class FitRow:
    """One figure of one run."""

    source: str
    load: str
    figure: str
    measured_ms: float
    predicted_ms: float

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_ms / self.measured_ms - 1.0 if self.measured_ms else 0.0

    @property
    def ok(self) -> bool:
        """Within its bound."""
        return abs(self.error) <= bound_of(self.figure)

    def record(self) -> FitRowRecord:
        """The JSON row."""
        return FitRowRecord(
            source=self.source,
            load=self.load,
            figure=self.figure,
            measured_ms=round(self.measured_ms, 3),
            predicted_ms=round(self.predicted_ms, 3),
            error=round(self.error, 4),
        )

    def describe(self) -> str:
        """'ttft.p95 at all at once (FILE): predicted 1,716 ms, measured 448 ms (+283%,
        bound 20%)'."""
        name = self.source.rsplit("/", 1)[-1]
        return (
            f"{self.figure} at {self.load} ({name}): predicted {self.predicted_ms:,.0f} ms, "
            f"measured {self.measured_ms:,.0f} ms ({self.error:+.0%}, bound "
            f"{bound_of(self.figure):.0%})"
        )


@dataclass(frozen=True)
class FitTable:
    """Every fitted run's figures, predicted vs measured."""

    rows: tuple[FitRow, ...]
    skipped: tuple[str, ...] = ()
    """Logs with no known arrivals (no times, no stated rate): not replayed."""

    @property
    def reproduces(self) -> bool | None:
        """Every figure within its bound (None: no run could be replayed)."""
        return all(r.ok for r in self.rows) if self.rows else None

    @property
    def failures(self) -> list[FitRow]:
        """The figures outside their bound, worst first."""
        bad = [r for r in self.rows if not r.ok]
        return sorted(bad, key=lambda r: -abs(r.error) / bound_of(r.figure))

    def per_run(self) -> list[tuple[str, str, int, int]]:
        """(source, load, figures within bound, figures) per run, in order."""
        out: dict[tuple[str, str], list[bool]] = {}
        for r in self.rows:
            out.setdefault((r.source, r.load), []).append(r.ok)
        return [(s, ld, sum(v), len(v)) for (s, ld), v in out.items()]

    def refusal(self) -> str:
        """Why no policy verdict is given (empty when the model reproduces its data)."""
        bad = self.failures
        if not bad:
            return ""
        worst = "; ".join(r.describe() for r in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        return (
            f"no policy verdict: the model does not reproduce the runs it was fitted on "
            f"({len(bad)} of {len(self.rows)} figures outside 10% on medians, 20% on tails): "
            f"{worst}{more}"
        )


def fitted_range(levels: tuple[dict[str, object], ...]) -> tuple[float, float] | None:
    """(lowest, highest) request rate of the fitted runs, inf for a burst (all at once);
    None when no run states one."""
    rates = []
    for lvl in levels:
        r = lvl.get("rate_per_s")
        if r == "all at once":
            rates.append(float("inf"))
        elif isinstance(r, int | float):
            rates.append(float(r))
    return (min(rates), max(rates)) if rates else None


def outside_words(levels: tuple[dict[str, object], ...], rate: float) -> str:
    """'; 9.5/s a replica is outside the fitted range (1/s to 4/s)' for a decision's reason,
    or '' within the range (or without a fitted rate)."""
    span = fitted_range(levels)
    if span is None or span[0] <= rate <= span[1]:
        return ""
    lo, hi = span
    top = "all at once" if hi == float("inf") else f"{hi:g}/s"
    fitted = "all at once only" if lo == float("inf") else f"{lo:g}/s to {top}"
    return f"; {rate:.3g}/s a replica is outside the fitted range ({fitted})"


def outside_note(levels: tuple[dict[str, object], ...], rate: float, what: str) -> str:
    """'outside the fitted range: ...' when `rate` (requests/s a replica is offered) lies
    outside the fitted runs' rates, else ''."""
    span = fitted_range(levels)
    if span is None or span[0] <= rate <= span[1]:
        return ""
    lo, hi = span
    top = "all at once" if hi == float("inf") else f"{hi:g}/s"
    fitted = "all at once only" if lo == float("inf") else f"{lo:g}/s to {top}"
    shown = "all at once" if rate == float("inf") else f"{rate:.3g} requests/s a replica"
    return (
        f"{what}: {shown} is outside the fitted range ({fitted}): the model "
        "extrapolates there, and its figures are not checked against any run"
    )
