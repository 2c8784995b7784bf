"""Fitting the queueing model from one or more logs of the same service.

Work per request is the log's own requests, whole: a simulated request copies
one logged row (end-to-end time, stage times, token counts), so correlations
between stages and sizes stay as recorded. The recorded time already holds
whatever queueing the service did when the log was taken, so a log recorded
near saturation overstates the work; the model says so when it can tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.audit.events import read_events
from tailbudget.errors import TailbudgetError
from tailbudget.sim.model import Param, ServiceModel, WorkSamples

__all__ = [
    "LoggedRequests",
    "ModelOptions",
    "common_params",
    "fit_queue_model",
    "load_level",
    "minute_rates",
    "pooled_samples",
    "read_event_times",
]

DEFAULT_PROVISION_DELAY_S = 30.0
DEFAULT_COLD_WINDOW_S = 300.0
DEFAULT_LOW_PRIORITY = 0.3
_MIN_COLD = 30
_MIN_MINUTES = 10


@dataclass(frozen=True)
class ModelOptions:
    """What the user states instead of (or on top of) what the log shows."""

    concurrency: int | None = None
    provision_delay_s: float | None = None
    cold_factor: float | None = None
    cold_window_s: float | None = None
    logging_overhead_ms: float | None = None
    low_priority_share: float | None = None
    low_priority_note: str = ""
    """Where a measured `low_priority_share` comes from (the budget's lowest-priority class)."""
    events_s: tuple[float, ...] = ()
    """Scale-up / deploy times (epoch s) whose following window is cold."""
    batch_limit: int | None = None
    token_budget: int | None = None
    prefix_hit_rate: float | None = None
    """Share of prompt tokens served from a prefix cache (LLM model), when stated."""
    prefix_cache_blocks: int | None = None
    """KV-cache blocks (512 tokens) a replica's prefix cache holds, when stated."""


@dataclass(frozen=True)
class LoggedRequests:
    """One log, reduced to numpy arrays (time-ordered when it has time)."""

    source: str
    total_ms: npt.NDArray[np.float64]
    error: npt.NDArray[np.bool_]
    ts_s: npt.NDArray[np.float64] | None = None
    stages: dict[str, npt.NDArray[np.float64]] | None = None
    input_tokens: npt.NDArray[np.float64] | None = None
    output_tokens: npt.NDArray[np.float64] | None = None
    ttft_ms: npt.NDArray[np.float64] | None = None
    classes: npt.NDArray[np.str_] | None = None
    """Each request's class (the budget's `classes.by` column), when asked for."""
    rate_per_s: float | None = None
    """Offered load when the log states it (a benchmark's request rate); inf = all at once."""
    duration_s: float | None = None


def read_event_times(path: str | Path) -> tuple[float, ...]:
    """Times (epoch s) of an events CSV: a column timestamp, ts, time or t.

    The audit's reader, so both commands refuse the same bad files (binary, not
    UTF-8, a bad or empty time) with the same one-line errors.
    """

    return tuple(when.timestamp() for when, _ in read_events(Path(path)))


def pooled_samples(logs: Sequence[LoggedRequests]) -> WorkSamples:
    names = sorted(set.intersection(*(set(lg.stages or {}) for lg in logs))) if logs else []

    def cat(get: Any) -> npt.NDArray[np.float64] | None:
        parts = [get(lg) for lg in logs]
        return None if any(p is None for p in parts) else np.concatenate(parts)

    return WorkSamples(
        work_ms=np.concatenate([lg.total_ms for lg in logs]),
        error=np.concatenate([lg.error for lg in logs]),
        stages={s: np.concatenate([(lg.stages or {})[s] for lg in logs]) for s in names},
        input_tokens=cat(lambda lg: lg.input_tokens),
        output_tokens=cat(lambda lg: lg.output_tokens),
        classes=None
        if any(lg.classes is None for lg in logs) or not logs
        else np.concatenate([lg.classes for lg in logs]),
    )


def load_level(lg: LoggedRequests) -> dict[str, Any]:
    """Rate, mean concurrency (Little's law) and percentiles of one log."""
    rate = lg.rate_per_s
    span = lg.duration_s
    if span is None and lg.ts_s is not None and lg.ts_s.size > 1:
        span = float(lg.ts_s[-1] - lg.ts_s[0])
    if rate is None and span:
        rate = lg.total_ms.size / span
    mean_s = float(np.mean(lg.total_ms)) / 1000.0
    return {
        "source": lg.source,
        "requests": int(lg.total_ms.size),
        "rate_per_s": None if rate is None else (rate if np.isfinite(rate) else "all at once"),
        "duration_s": span,
        "mean_in_flight": None
        if not span
        else round(float(np.sum(lg.total_ms)) / 1000.0 / span, 3),
        "mean_ms": round(mean_s * 1000.0, 3),
        "p50_ms": round(float(np.percentile(lg.total_ms, 50)), 3),
        "p99_ms": round(float(np.percentile(lg.total_ms, 99)), 3),
    }


def _cold(lg: Sequence[LoggedRequests], opts: ModelOptions) -> tuple[Param, Param, list[str]]:
    window = opts.cold_window_s if opts.cold_window_s is not None else DEFAULT_COLD_WINDOW_S
    if opts.cold_window_s is not None:
        wparam = Param("cold_window_s", window, "s", "stated")
    else:
        wparam = Param("cold_window_s", window, "s", "default", "the audit's cold window (5 min)")
    if opts.cold_factor is not None:
        return Param("cold_factor", opts.cold_factor, "x", "stated"), wparam, []
    timed = [g for g in lg if g.ts_s is not None]
    if not opts.events_s or not timed:
        why = "no events" if not opts.events_s else "the log has no timestamps"
        note = f"{why}: no cold windows to measure; replicas start warm (state cold_factor)"
        return Param("cold_factor", 1.0, "x", "default", note), wparam, []
    ts = np.concatenate([g.ts_s for g in timed if g.ts_s is not None])
    tot = np.concatenate([g.total_ms for g in timed])
    ev = np.asarray(opts.events_s)
    k = np.searchsorted(ev, ts, side="right") - 1
    cold = (k >= 0) & (ts - ev[np.maximum(k, 0)] <= window)
    if cold.sum() < _MIN_COLD or (~cold).sum() < _MIN_COLD:
        note = f"only {int(cold.sum())} requests in cold windows: too few to measure; none assumed"
        return Param("cold_factor", 1.0, "x", "default", note), wparam, [note]
    factor = float(np.mean(tot[cold]) / np.mean(tot[~cold]))
    note = (
        f"mean of {int(cold.sum())} requests within {window:g}s after {ev.size} events / "
        f"mean of the {int((~cold).sum())} others"
    )
    return Param("cold_factor", max(1.0, factor), "x", "measured", note), wparam, []


def common_params(
    logs: Sequence[LoggedRequests], opts: ModelOptions
) -> tuple[list[Param], list[str]]:
    """Cold start, provisioning delay, logging overhead and low-priority share."""
    cold, window, notes = _cold(logs, opts)
    delay = (
        Param("provision_delay_s", opts.provision_delay_s, "s", "stated")
        if opts.provision_delay_s is not None
        else Param(
            "provision_delay_s",
            DEFAULT_PROVISION_DELAY_S,
            "s",
            "default",
            "a log does not show how long a replica takes to start; state provision_delay",
        )
    )
    overhead = (
        Param("logging_overhead_ms", opts.logging_overhead_ms, "ms", "stated")
        if opts.logging_overhead_ms is not None
        else Param(
            "logging_overhead_ms",
            0.0,
            "ms",
            "default",
            "trim_logging saves nothing unless logging_overhead_ms states its cost",
        )
    )
    share = (
        Param(
            "low_priority_share",
            opts.low_priority_share,
            "share",
            "measured" if opts.low_priority_note else "stated",
            opts.low_priority_note,
        )
        if opts.low_priority_share is not None
        else Param(
            "low_priority_share",
            DEFAULT_LOW_PRIORITY,
            "share",
            "default",
            "the log has no priority column; shed_load may drop this share of arrivals",
        )
    )
    return [cold, window, delay, overhead, share], notes


def minute_rates(ts: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Requests/s of each request's minute (times sorted)."""
    minute = np.floor((ts - ts[0]) / 60.0).astype(np.int64)
    return np.asarray(np.bincount(minute)[minute] / 60.0, dtype=np.float64)


def _contention(lg: LoggedRequests) -> tuple[Param, npt.NDArray[np.float64]] | None:
    """Mean latency per minute against requests/s (the audit's contention rule: >= 10
    minutes, R² >= 0.5, rising); None when the log shows no such load dependence."""
    if lg.ts_s is None or lg.ts_s.size < 100:
        return None
    rates = minute_rates(lg.ts_s)
    minute = np.floor((lg.ts_s - lg.ts_s[0]) / 60.0).astype(np.int64)
    if minute.max() + 1 < _MIN_MINUTES:
        return None
    counts = np.bincount(minute)
    used = counts > 0
    mean = np.bincount(minute, weights=lg.total_ms)[used] / counts[used]
    x = counts[used] / 60.0
    if np.ptp(x) <= 0:
        return None
    b, a = np.polyfit(x, mean, 1)
    ss = float(((mean - mean.mean()) ** 2).sum())
    r2 = 1.0 - float(((mean - a - b * x) ** 2).sum()) / ss if ss else 0.0
    if b <= 0 or r2 < 0.5:
        return None
    note = (
        f"per-minute mean = {a:,.1f} + {b:,.1f} x requests/s (r2 {r2:.2f}, "
        f"{int(used.sum())} minutes): a replica's work grows with the load it receives"
    )
    return Param("load_slope_ms_per_rps", float(b), "ms per request/s", "fitted", note), rates


def _peak_in_flight(lg: LoggedRequests) -> int:
    assert lg.ts_s is not None
    ends = np.sort(lg.ts_s + lg.total_ms / 1000.0)
    inflight = np.arange(1, lg.ts_s.size + 1) - np.searchsorted(ends, lg.ts_s, side="right")
    return max(1, int(inflight.max()))


def fit_queue_model(logs: Sequence[LoggedRequests], opts: ModelOptions) -> ServiceModel:
    """The K-slots-per-replica model from whole logged requests."""
    if not logs:
        raise TailbudgetError("give at least one LOG to fit the model from")
    (cold, window, delay, overhead, share), notes = common_params(logs, opts)
    found = _contention(logs[0]) if len(logs) == 1 else None
    samples = pooled_samples(logs)
    if found is not None:
        samples = replace(samples, load_rps=found[1])
    if opts.concurrency is not None:
        conc = Param("concurrency", float(opts.concurrency), "requests", "stated")
    elif found is not None:
        conc = Param(
            "concurrency",
            float(_peak_in_flight(logs[0])),
            "requests",
            "measured",
            "the log's peak in flight: with load-dependent work, one simulated replica is "
            "the fleet that served the log",
        )
    else:
        conc = Param(
            "concurrency",
            1.0,
            "requests",
            "default",
            "a log does not show how many requests one replica serves at once; state concurrency",
        )
    levels = tuple(load_level(lg) for lg in logs)
    return ServiceModel(
        kind="queue",
        samples=samples,
        load_slope=None if found is None else found[0],
        concurrency=conc,
        cold_factor=cold,
        cold_window_s=window,
        provision_delay_s=delay,
        logging_overhead_ms=overhead,
        low_priority_share=share,
        sources=tuple(lg.source for lg in logs),
        load_levels=levels,
        fit_quality={"work": "empirical (no fit: the log's own requests)"},
        notes=(
            "work = each logged request's end-to-end time; queueing the log already holds "
            "is counted as work",
            *notes,
        ),
    )
