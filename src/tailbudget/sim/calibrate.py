"""Refining the step-time model by replaying the fitted runs on their own arrivals.

The first estimates come straight from the logs (fit_llm.py). They are then moved,
one parameter at a time, while that lowers the runs' misfit: each figure's log
error over its bound (10% on medians, 20% on tails), squared and summed over every
run, with figures beyond their bound counted again. The search replays each
Poisson run on one seed (the same for every try, so tries compare on the same
arrivals); the fit table then replays three.

What moves: the decode step (`step_base_ms`, `step_per_seq_ms`), the prefill
cost per uncached token and per prefilling step, the time outside the engine, the
front end's time per request (seen only when many arrive at once), the token
budget (a burst shows it; tried among vLLM's usual values) and each run's prefix-
cache hit share, except the coldest run's, which anchors the cold per-token cost
(with one run the share cannot be told from the cost: it stays 0, the cost is
effective).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tailbudget.sim.decode_fit import burst_points, decode_line
from tailbudget.sim.fit_table import bound_of
from tailbudget.sim.model import Param, ServiceModel
from tailbudget.sim.own_runs import OwnRun, predict
from tailbudget.sim.replay_one import replay_one

__all__ = ["Theta", "calibrate", "misfit"]

BUDGETS = (2048, 4096, 8192, 16384)
MAX_TRIES = 240
_TRACE = False
_FLAT = 0.01
_MARGIN = 0.7
"""A search may stop once every figure is within this share of its bound..."""
_WIDE = 1e6
"""...which the misfit marks by adding this (once) when some figure is not: a search
that has reached it never leaves it, and the loss below it is the plain misfit."""
_OUT = 1e7
_HIT_MAX = 0.97


@dataclass(frozen=True)
class Theta:
    """The parameters the search moves."""

    step_base_ms: float
    step_per_seq_ms: float
    prefill_step_ms: float
    prefill_per_token_ms: float
    fixed_ms: float
    ingest_ms: float
    token_budget: int
    hits: tuple[float, ...]
    step_per_kv_ms: float = 0.0
    free_hits: tuple[bool, ...] = field(default=())

    def model(self, base: ServiceModel) -> ServiceModel:
        """`base` with these values (each keeps its Param's source and note)."""
        assert base.llm is not None
        p = base.llm

        def put(param: Param, value: float) -> Param:
            return replace(param, value=float(value))

        llm = replace(
            p,
            step_base_ms=put(p.step_base_ms, self.step_base_ms),
            step_per_seq_ms=put(p.step_per_seq_ms, self.step_per_seq_ms),
            step_per_kv_ms=put(p.step_per_kv_ms, self.step_per_kv_ms),
            prefill_step_ms=put(p.prefill_step_ms, self.prefill_step_ms),
            prefill_per_token_ms=put(p.prefill_per_token_ms, self.prefill_per_token_ms),
            fixed_ms=put(p.fixed_ms, self.fixed_ms),
            ingest_ms=put(p.ingest_ms, self.ingest_ms),
            token_budget=put(p.token_budget, self.token_budget),
        )
        return replace(base, llm=llm)


def misfit(
    base: ServiceModel, runs: Sequence[OwnRun], theta: Theta, seeds: int | None = 1
) -> float:
    """Sum over runs and figures of (log error / log(1 + bound))^2, beyond-bound excess
    counted four times more; plus _WIDE while some figure is beyond 70% of its bound and
    _OUT while some figure is beyond its bound (tiers a move never goes back up)."""
    model = theta.model(base)
    total = worst = 0.0
    for run, hit in zip(runs, theta.hits, strict=True):
        got = predict(model, run, hit, seeds=seeds)
        for name, want in run.measured.items():
            pred = got.get(name, math.nan)
            if not (want > 0 and pred > 0 and math.isfinite(pred)):
                total += 25.0 if want > 0 else 0.0
                worst = max(worst, 9.0 if want > 0 else 0.0)
                continue
            z = abs(math.log(pred / want)) / math.log1p(bound_of(name))
            total += z * z + 4.0 * max(0.0, z - 0.9) ** 2
            worst = max(worst, z)
    return total + _WIDE * (worst > _MARGIN) + _OUT * (worst > 1.0)


Move = Callable[[Theta, float], Theta | None]


def _moves(theta: Theta, identified_slope: bool, anchored: bool) -> list[tuple[str, Move, float]]:
    """(name, move(theta, signed step) or None when out of range, first step)."""

    def scale(attr: str, floor: float) -> Move:
        def go(t: Theta, s: float) -> Theta | None:
            v = max(getattr(t, attr), floor) * math.exp(s)
            return replace(t, **{attr: v})

        return go

    def shift(attr: str, lo: float) -> Move:
        def go(t: Theta, s: float) -> Theta | None:
            v = getattr(t, attr) + s
            return None if v < lo else replace(t, **{attr: v})

        return go

    def hit(i: int) -> Move:
        def go(t: Theta, s: float) -> Theta | None:
            v = t.hits[i] + s
            if not 0.0 <= v <= _HIT_MAX:
                return None
            return replace(t, hits=(*t.hits[:i], v, *t.hits[i + 1 :]))

        return go

    c0 = max(theta.step_base_ms, 1.0)
    out: list[tuple[str, Move, float]] = [
        ("step_base_ms", scale("step_base_ms", 0.5), 0.05),
        ("fixed_ms", shift("fixed_ms", -1e9), 0.5 * c0),
        ("prefill_step_ms", shift("prefill_step_ms", 0.0), 0.5 * c0),
        ("ingest_ms", shift("ingest_ms", 0.0), 1.0),
    ]
    if not anchored:  # several runs: the coldest run's TTFT slope is the cold cost
        out.insert(1, ("prefill_per_token_ms", scale("prefill_per_token_ms", 1e-4), 0.4))
    if identified_slope:
        out.insert(1, ("step_per_seq_ms", scale("step_per_seq_ms", 0.005), 0.1))
        out.insert(2, ("step_per_kv_ms", scale("step_per_kv_ms", 0.01), 0.1))
    out += [(f"hit{i}", hit(i), 0.2) for i, free in enumerate(theta.free_hits) if free]
    return out


def _best_budget(
    base: ServiceModel, runs: Sequence[OwnRun], theta: Theta, loss: float, seeds: int | None
) -> tuple[Theta, float, int]:
    tries = 0
    for b in BUDGETS:
        if b == theta.token_budget:
            continue
        cand = replace(theta, token_budget=b)
        got = misfit(base, runs, cand, seeds)
        tries += 1
        if got < loss:
            theta, loss = cand, got
    return theta, loss, tries


def _decode_points(
    base: ServiceModel, run: OwnRun, theta: Theta, hit: float
) -> list[tuple[float, float, float]]:
    """A burst's own points, else the run's median gap at its replay's decode-only steps."""
    if run.is_burst and run.itls_ms and run.ttft_ms is not None and run.t_s is None:
        return burst_points(run.ttft_ms, run.input_tokens, run.itls_ms)
    model = theta.model(base)
    assert model.llm is not None
    llm = replace(model.llm, prefix_hit_rate=replace(model.llm.prefix_hit_rate, value=hit))
    arr = run.arrivals(0)
    _, _, dt, n, ctx = replay_one(llm, arr.t_s, run.input_tokens, run.output_tokens)
    pure = theta.step_base_ms + theta.step_per_seq_ms * n + theta.step_per_kv_ms * ctx / 1000.0
    only = dt <= pure + 1e-6
    if not only.any():
        return []
    w = n[only]
    return [
        (
            float((w * w).sum() / w.sum()),
            float((w * ctx[only]).sum() / w.sum()),
            run.itl_median,
        )
    ]


def fit_decode(base: ServiceModel, runs: Sequence[OwnRun], theta: Theta) -> Theta:
    """The decode line through every run's points (decode_fit.py), twice: a paced run's
    point depends on the line its replay ran with."""
    for _ in range(2):
        groups = [
            _decode_points(base, run, theta, hit) for run, hit in zip(runs, theta.hits, strict=True)
        ]
        groups = [g for g in groups if g]
        if not groups:
            return theta
        if len(groups) == 1 and len(groups[0]) == 1:  # one level: its median gap, flat
            return replace(theta, step_base_ms=groups[0][0][2], step_per_seq_ms=0.0)
        c0, c1, c2 = decode_line(groups)
        theta = replace(theta, step_base_ms=c0, step_per_seq_ms=c1, step_per_kv_ms=c2)
    return theta


def calibrate(
    base: ServiceModel,
    runs: Sequence[OwnRun],
    start: Theta,
    *,
    fit_budget: bool,
    identified_slope: bool,
    seeds: int | None = 1,
    max_tries: int = MAX_TRIES,
) -> tuple[Theta, float, int]:
    """(The refined parameters, their misfit (tiers removed), the replays tried); `seeds`
    per Poisson run (None: the fit table's)."""
    theta = fit_decode(base, runs, start) if seeds == 1 else start
    loss = misfit(base, runs, theta, seeds)
    tries = 1
    if fit_budget:
        theta, loss, n = _best_budget(base, runs, theta, loss, seeds)
        tries += n
    moves = _moves(theta, identified_slope, any(theta.free_hits))
    steps = {name: first for name, _, first in moves}
    last, better = math.inf, False
    while tries < max_tries and max(steps.values(), default=0.0) > 1e-3:
        if loss < _WIDE and tries > len(moves) * 4:  # every figure well within its bound
            break
        if _TRACE:
            print(tries, loss)
        if better and loss < _OUT and last - loss < _FLAT * (loss % _WIDE):
            break  # every figure within its bound, and the last round won under 1%
        last = loss
        better = False
        for name, move, _ in moves:
            for sign in (1.0, -1.0):
                cand = move(theta, sign * steps[name])
                if cand is None:
                    continue
                got = misfit(base, runs, cand, seeds)
                tries += 1
                if got < loss - 1e-9:
                    theta, loss, better = cand, got, True
                    steps[name] *= 1.5
                    break
            else:
                steps[name] *= 0.5
        if not better and loss < 1e-6:
            break
    return theta, loss % _WIDE, tries


def cold_slope(ttft_ms: np.ndarray, input_tokens: np.ndarray) -> tuple[float, float]:
    """(ms per prompt token, intercept) of TTFT against prompt length."""
    if np.ptp(input_tokens) <= 0:
        return 0.0, float(np.mean(ttft_ms))
    b, a = np.polyfit(input_tokens, ttft_ms, 1)
    return float(b), float(a)
