"""From LOG paths to a fitted model: read every log, pick the model kind, fit once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.errors import TailbudgetError
from tailbudget.logs import ReadOptions
from tailbudget.sim.arrivals import ArrivalSpec
from tailbudget.sim.bounds import parse_max_events
from tailbudget.sim.fit import LoggedRequests, ModelOptions, fit_queue_model
from tailbudget.sim.fit_llm import fit_llm_model, is_llm
from tailbudget.sim.inputs import read_logged
from tailbudget.sim.model import ServiceModel

__all__ = ["Fitted", "fit_logs"]


@dataclass(frozen=True)
class Fitted:
    """The model and what the first log says about its own load."""

    model: ServiceModel
    logs: tuple[LoggedRequests, ...]

    @property
    def log_times(self) -> npt.NDArray[np.float64] | None:
        """The first log's request times (the pooled samples start with its rows)."""
        return self.logs[0].ts_s

    def own_arrivals(self) -> ArrivalSpec:
        """The first log's load: its own times, else its benchmark's run (its requests at
        its stated rate, or all at once), each logged request once in the order sent."""
        first = self.logs[0]
        if first.ts_s is not None and first.ts_s.size > 1:
            return ArrivalSpec("log")
        rate = first.rate_per_s
        n = int(first.total_ms.size)
        if rate is not None and np.isfinite(rate):
            return ArrivalSpec("poisson", rate=float(rate), count=n, in_order=True)
        if rate is not None:
            return ArrivalSpec("burst", count=n, in_order=True)
        raise TailbudgetError(
            f"{first.source}: no timestamps and no stated rate, so its load is unknown; "
            "give arrivals as poisson:RATE, burst:N or a CSV trace",
            param="arrivals",
        )


def fit_logs(
    paths: Sequence[Any],
    read: ReadOptions,
    opts: ModelOptions,
    *,
    kind: str | None = None,
    max_events: int | None = None,
    classes: bool = False,
) -> Fitted:
    """Fit one model to all `paths` (logs of the same service, e.g. at several loads;
    paths or data in memory, as `read_log` takes them); a log spanning more minutes than
    `max_events` is refused (sim/bounds.py)."""
    if not paths:
        raise TailbudgetError("give at least one LOG")
    pairs = [read_logged(p, read, max_events=max_events, classes=classes) for p in paths]
    logs = [lg for lg, _ in pairs]
    llm = is_llm(logs) if kind is None else kind == "llm"
    if llm and not is_llm(logs):
        raise TailbudgetError("an LLM model needs logs with ttft, decode and output tokens")
    if llm and any(lg.input_tokens is None for lg in logs):
        raise TailbudgetError("an LLM model needs input (prompt) token counts in every log")
    if llm:
        _check_fit_steps(logs, parse_max_events(max_events))
    model = fit_llm_model(logs, [e for _, e in pairs], opts) if llm else fit_queue_model(logs, opts)
    return Fitted(model, tuple(logs))


def _check_fit_steps(logs: Sequence[LoggedRequests], bound: int) -> None:
    """The LLM fit replays each log's own run, which takes at least as many decode steps
    as its longest answer: refused past the bound before a step runs (answers of 1e9
    tokens ran the fit out of memory)."""
    for lg in logs:
        if lg.output_tokens is None or lg.output_tokens.size == 0:
            continue
        longest = float(lg.output_tokens.max())
        if not longest <= bound:
            raise TailbudgetError(
                f"{lg.source}'s output tokens: fitting replays its own run, at least "
                f"{longest:,.0f} decode steps (its longest answer), above the bound of "
                f"{bound:,}; check the log's output lengths, or raise max_events",
                param="max_events",
            )
