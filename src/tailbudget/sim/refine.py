"""From first estimates to the model that reproduces its runs, with its fit table.

The calibration (calibrate.py) moves the step-time parameters and each run's prefix-
cache hit share; the fit table replays every run on its own arrivals with the result.
A run that prefills faster than the coldest run's per-token cost gets a hit share,
and the model says so ("prefill at N tokens/s, faster than cold: warm prefix cache
suspected"). The model's own `prefix_hit_rate` (what a simulation uses) is the stated
one, else the first log's fitted share (the log whose arrivals simulate replays).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from tailbudget.sim.calibrate import Theta, calibrate, cold_slope
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fit_table import FitRow, FitTable
from tailbudget.sim.hit_levels import HitLevel, offered_rate
from tailbudget.sim.model import Param, ServiceModel
from tailbudget.sim.own_runs import OwnRun, predict

__all__ = ["fit_table", "hit_levels", "refine", "warm_cache_notes"]

_MORE = 80
"""Replays on the table's seeds when the one-seed search leaves a figure outside."""
_SUSPECT = 0.1
"""A fitted hit share above this is reported as a warm prefix cache."""


def _cold_index(runs: Sequence[OwnRun]) -> int:
    """The run anchoring the cold cost: the lowest stated rate (a benchmark sweep's first,
    coldest pass), else the first."""
    rates = [r.rate if r.rate is not None else np.inf for r in runs]
    return int(np.argmin(rates))


def _start(model: ServiceModel, runs: Sequence[OwnRun]) -> Theta:
    assert model.llm is not None
    p = model.llm
    cold = _cold_index(runs)
    return Theta(
        step_base_ms=p.step_base_ms.value,
        step_per_seq_ms=max(p.step_per_seq_ms.value, 0.01),
        prefill_step_ms=p.prefill_step_ms.value,
        prefill_per_token_ms=p.prefill_per_token_ms.value,
        fixed_ms=p.fixed_ms.value,
        ingest_ms=p.ingest_ms.value,
        token_budget=int(p.token_budget.value),
        hits=tuple(
            0.0 if i == cold else _first_share(run, p.prefill_per_token_ms.value, runs[cold])
            for i, run in enumerate(runs)
        ),
        free_hits=tuple(len(runs) > 1 and i != cold for i in range(len(runs))),
    )


def _first_share(run: OwnRun, per_token_ms: float, cold: OwnRun) -> float:
    """A first hit share: a burst's prompt tokens at the cold cost against the time it took
    to deliver every first token; a paced run's TTFT slope against the cold run's."""
    if run.rate is not None and not np.isfinite(run.rate):
        need = per_token_ms * float(run.input_tokens.sum())
        took = run.measured["ttft.p99"]
        return float(np.clip(1.0 - took / need, 0.0, 0.95)) if need > 0 else 0.0
    ttft = run.ttft_ms
    ref = cold.ttft_ms
    if ttft is None or ref is None:
        return 0.0
    mine, _ = cold_slope(ttft, run.input_tokens)
    theirs, _ = cold_slope(ref, cold.input_tokens)
    return float(np.clip(1.0 - mine / theirs, 0.0, 0.95)) if theirs > 0 else 0.0


def fit_table(model: ServiceModel, runs: Sequence[OwnRun], hits: Sequence[float]) -> FitTable:
    """Every run's figures on its own arrivals (mean of its seeds) vs its measured ones."""
    rows = []
    for run, hit in zip(runs, hits, strict=True):
        got = predict(model, run, hit)
        for name, want in run.measured.items():
            if name in got and np.isfinite(want) and want > 0:
                rows.append(FitRow(run.source, run.load, name, want, got[name]))
    return FitTable(tuple(rows))


def warm_cache_notes(
    model: ServiceModel, runs: Sequence[OwnRun], hits: Sequence[float]
) -> list[str]:
    """'prefill at N tokens/s, faster than cold: warm prefix cache suspected' per such run."""
    assert model.llm is not None
    per_token = model.llm.prefill_per_token_ms.value
    if per_token <= 0 or len(runs) < 2:
        return []
    cold = runs[_cold_index(runs)]
    out = []
    for run, hit in zip(runs, hits, strict=True):
        if hit > _SUSPECT:
            out.append(
                f"{run.source} at {run.load}: prefill at {1000.0 / (per_token * (1 - hit)):,.0f} "
                f"tokens/s, faster than cold ({1000.0 / per_token:,.0f} tokens/s, "
                f"{cold.source} at {cold.load}): warm prefix cache suspected, fitted hit "
                f"share {hit:.0%} of prompt tokens"
            )
    return out


def _hit_param(opts: ModelOptions, runs: Sequence[OwnRun], hits: Sequence[float]) -> Param:
    if opts.prefix_hit_rate is not None:
        return Param("prefix_hit_rate", opts.prefix_hit_rate, "share", "stated")
    if len(runs) < 2:
        return Param(
            "prefix_hit_rate",
            0.0,
            "share",
            "default",
            "one run cannot tell cached tokens from a cheaper token: its per-token cost is "
            "effective (state prefix_hit_rate)",
        )
    shares = ", ".join(f"{r.load} {h:.0%}" for r, h in zip(runs, hits, strict=True))
    return Param(
        "prefix_hit_rate",
        float(hits[0]),
        "share",
        "fitted",
        f"the first log's fitted share of prompt tokens cached (per run: {shares}); the "
        "coldest run anchors the cold cost; a simulation takes the share at its own offered "
        "rate per replica, linear in log(rate) between the runs' (a burst: the burst's)",
    )


def refine(
    model: ServiceModel, runs: Sequence[OwnRun], opts: ModelOptions, two_levels: bool
) -> ServiceModel:
    """The calibrated model with its fit table, hit shares and warm-cache notes."""
    if not runs:
        why = "no log has arrival times or a stated rate: no run to replay, no fit table"
        return replace(model, fit=FitTable((), skipped=model.sources), notes=(*model.notes, why))
    burst = any(r.rate is not None and not np.isfinite(r.rate) for r in runs)
    burst |= any(r.t_s is not None and float(r.t_s[-1]) < 1.0 for r in runs)
    fit_budget = burst and opts.token_budget is None
    slope = two_levels or burst
    theta, loss, tries = calibrate(
        model, runs, _start(model, runs), fit_budget=fit_budget, identified_slope=slope
    )
    paced = any(r.seeds > 1 for r in runs)
    if paced and fit_table(theta.model(model), runs, theta.hits).reproduces is False:
        # the search judged Poisson runs on one seed; the table averages three
        theta, loss, more = calibrate(
            model, runs, theta, fit_budget=False, identified_slope=slope, seeds=None,
            max_tries=_MORE,
        )  # fmt: skip
        tries += more
    tuned = theta.model(model)
    assert tuned.llm is not None
    llm = replace(tuned.llm, prefix_hit_rate=_hit_param(opts, runs, theta.hits))
    if opts.prefix_hit_rate is None and len(runs) >= 2:
        llm = replace(llm, hit_levels=hit_levels(runs, theta.hits))
    if burst and opts.token_budget is None:
        llm = replace(
            llm,
            token_budget=replace(
                llm.token_budget,
                source="fitted",
                note="the vLLM value (2,048 ... 16,384) that best reproduces the burst",
            ),
        )
    if not (two_levels or burst):
        llm = replace(llm, step_per_seq_ms=replace(llm.step_per_seq_ms, value=0.0))
        one = "one load level: how the step grows with the batch is not identifiable"
        kv = replace(llm.step_per_kv_ms, value=0.0, source="default", note=one)
        llm = replace(llm, step_per_kv_ms=kv)
    elif llm.step_per_seq_ms.source == "default":  # a burst shows the batch grow and shrink
        llm = replace(
            llm,
            step_per_seq_ms=replace(
                llm.step_per_seq_ms, source="fitted", note="the burst's decode steps as it drains"
            ),
        )
    tuned = replace(tuned, llm=llm)
    table = fit_table(tuned, runs, theta.hits)
    levels = tuple(
        {**lvl, "prefix_hit_rate": None if h is None else round(h, 4)}
        for lvl, h in zip(tuned.load_levels, _per_source(model, runs, theta.hits), strict=True)
    )
    quality = {**tuned.fit_quality, "misfit": round(loss, 4), "replays": tries}
    notes = (*tuned.notes, *warm_cache_notes(tuned, runs, theta.hits))
    return replace(tuned, fit=table, load_levels=levels, fit_quality=quality, notes=notes)


def hit_levels(runs: Sequence[OwnRun], hits: Sequence[float]) -> tuple[HitLevel, ...]:
    """Each run's (requests/s, fitted share, burst): a paced run at its rate (stated, else
    its times'), a burst at the rate the server took it in (its requests over its last
    first token)."""
    out = []
    for run, hit in zip(runs, hits, strict=True):
        if run.is_burst:
            last = float(np.nanmax(run.ttft_ms)) / 1000.0 if run.ttft_ms is not None else 0.0
            rate = run.size / last if last > 0 else math.inf
        elif run.rate is not None:
            rate = float(run.rate)
        else:
            assert run.t_s is not None
            rate = offered_rate(run.t_s, 1)
        out.append((round(rate, 4), round(float(hit), 4), run.is_burst))
    return tuple(out)


def _per_source(
    model: ServiceModel, runs: Sequence[OwnRun], hits: Sequence[float]
) -> list[float | None]:
    by = {r.source: h for r, h in zip(runs, hits, strict=True)}
    return [by.get(s) for s in model.sources]
