"""The model policy live: `serve --model FILE | --fit LOG` sizes replicas from the fitted model.

`serve` posts what it observes (request times, end-to-end and TTFT figures);
each evaluation runs the same `ModelPolicy` the simulator runs, on the arrivals
observed so far (the observation times stand for arrival times) with the
model's own request mix, and reports the desired count and its reason, the
predicted and measured objectives and whether they drift apart. The reactive
rules are the runtime's own Controller: `serve` lets them scale while the model
drifts. `refit` re-reads the `--fit` logs, or, for a model file, re-centres the
model's work on the last window's observed end-to-end times (the parameters
stay as fitted).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.budget.objectives import Objectives
from tailbudget.budget.policy_model import ModelMode
from tailbudget.control.decision import Decision
from tailbudget.errors import TailbudgetError
from tailbudget.logs import ReadOptions
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.fleet import Knobs, TickView
from tailbudget.sim.limits import check_params
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.model_file import load_model
from tailbudget.sim.model_policy import ModelPolicy, model_headroom
from tailbudget.sim.trace import Arrivals

__all__ = ["LiveModel", "ModelSource"]

_KEEP_S = 900.0
"""Observations kept for the load and the mix (longer than any window the policy reads)."""
_REFIT_MIN = 200
REFIT_WAIT_S = 20.0
"""How long POST /v1/model/refit waits for a running evaluation before answering busy."""


@dataclass(frozen=True)
class ModelSource:
    """Where the live model came from: a model file, or logs fitted at start."""

    model_file: str | None = None
    fit_logs: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How status names it."""
        if self.model_file is not None:
            return f"file {self.model_file}"
        return "fitted from " + ", ".join(self.fit_logs)


def load_source(source: ModelSource) -> tuple[ServiceModel, str]:
    """(the model, when it was fitted) from a file or by fitting the logs now."""
    if source.model_file is not None:
        saved = load_model(source.model_file)
        return saved.model, saved.fitted_at
    if not source.fit_logs:
        raise TailbudgetError("the model policy needs a model file or logs to fit", param="model")

    model = fit_logs(list(source.fit_logs), ReadOptions(), ModelOptions()).model
    # A refit holds the file's checks: a fit out of range is refused, the old model kept.
    check_params(((p.name, p.value) for p in model.params()), "the fitted model", "refit")
    return model, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _spread(t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Sorted observation times with each run of equal stamps (a batch stamped when it was
    received) spread evenly up to the next stamp, at most 1 s: the model policy judges a
    minute's arrivals as they came, and a batch is not a burst of simultaneous requests."""
    if t.size < 2:
        return t
    starts = np.flatnonzero(np.r_[True, np.diff(t) > 0])
    sizes = np.diff(np.r_[starts, t.size])
    if sizes.max() == 1:
        return t
    nxt = np.r_[t[starts[1:]], t[-1] + 1.0]
    gap = np.minimum(nxt - t[starts], 1.0)
    rank = np.arange(t.size) - np.repeat(starts, sizes)
    return t + np.repeat(gap / sizes, sizes) * rank


class LiveModel:
    """The model policy fed by a live service's observations."""

    def __init__(
        self,
        source: ModelSource,
        objectives: Objectives,
        opts: ModelMode,
        *,
        headroom: float,
        bounds: tuple[int, int],
        every_s: float,
    ) -> None:
        self.source, self.objectives, self.opts = source, objectives, opts
        self.headroom, self.bounds, self.every_s = model_headroom(opts, headroom), bounds, every_s
        self.lock = threading.Lock()
        """Guards `pending` (posts add to it while an evaluation runs)."""
        self.busy = threading.RLock()
        """One evaluation or refit at a time (the evaluator and POST /v1/model/refit)."""
        self.ts: deque[npt.NDArray[np.float64]] = deque()
        self.done: deque[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], Any]] = deque()
        self.pending: list[tuple[Any, Any, Any, Any]] = []
        self.refits = 0
        self.refit_due: float | None = None
        self.last_refit: str | None = None
        self.model, self.fitted_at = load_source(source)
        self.policy = self._policy()
        self.last: dict[str, Any] = {}

    def _policy(self) -> ModelPolicy:
        empty = Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))
        p = ModelPolicy(
            self.model, self.objectives, empty, None, opts=self.opts,
            headroom=self.headroom, bounds=self.bounds,
        )  # fmt: skip
        p.every_s = self.every_s
        return p

    def observe(
        self,
        ts: npt.NDArray[np.float64],
        total_ms: npt.NDArray[np.float64],
        error: npt.NDArray[np.bool_],
        ttft_ms: npt.NDArray[np.float64] | None = None,
    ) -> None:
        """Requests the service saw (their times stand for arrivals)."""
        if ts.size == 0:
            return
        with self.lock:
            batch = (np.asarray(ts, float), np.asarray(total_ms, float), error, ttft_ms)
            self.pending.append(batch)

    def _arrivals(self, now: float) -> Arrivals:
        while self.ts and self.ts[0].size and self.ts[0].max() < now - _KEEP_S:
            self.ts.popleft()
        t = np.sort(np.concatenate(list(self.ts))) if self.ts else np.zeros(0)
        t = _spread(t[t <= now])
        # the model's own mix: each arrival copies a sample row, seeded by its time
        src = (np.floor(t * 1000.0).astype(np.int64) * 2654435761) % self.model.samples.size
        return Arrivals(t, src.astype(np.int64), np.zeros(t.size, dtype=bool))

    def evaluate(self, now: float, desired: int) -> tuple[int, list[Decision]]:
        """The count the model wants at `now` (from `desired`), and its decisions."""
        with self.busy:
            return self._evaluate(now, desired)

    def _evaluate(self, now: float, desired: int) -> tuple[int, list[Decision]]:
        with self.lock:
            batches, self.pending = self.pending, []
        ts_new = [b[0] for b in batches]
        self.ts.extend(ts_new)
        done_ts = np.concatenate(ts_new) if ts_new else np.zeros(0)
        done_ms = np.concatenate([b[1] for b in batches]) if batches else np.zeros(0)
        err = np.concatenate([b[2] for b in batches]) if batches else np.zeros(0, dtype=bool)
        ttfts = [b[3] for b in batches if b[3] is not None]
        ttft = np.concatenate(ttfts) if ttfts and len(ttfts) == len(batches) else None
        self._scheduled_refit(now)
        self.policy.arrivals = self._arrivals(now)
        view = TickView(now, done_ts, done_ms, err, 0.0, 0.0, desired, desired, ttft)
        knobs = Knobs(desired=desired)
        decisions = self.policy.tick(view, knobs)
        self._remember(batches)
        return knobs.desired, decisions

    def _scheduled_refit(self, now: float) -> None:
        """`refit_every`: refit as POST /v1/model/refit would, once enough is observed."""
        every = self.opts.refit_every_s
        if every is None:
            return
        if self.refit_due is None:
            self.refit_due = now + every
        if now < self.refit_due:
            return
        self.refit_due = now + every
        try:
            self.last_refit = f"scheduled: {self.refit()}"
        except TailbudgetError as exc:
            self.last_refit = f"scheduled refit skipped: {exc}"

    def _remember(self, batches: list[tuple[Any, Any, Any, Any]]) -> None:
        for b in batches:
            self.done.append((b[0], b[1], b[3]))
        while sum(x[0].size for x in self.done) > 20_000 and len(self.done) > 1:
            self.done.popleft()

    @property
    def drifting(self) -> bool:
        """Measured departs from predicted beyond the stated error, for the stated span."""
        return self.policy.drifting

    def refit(self) -> str:
        """Re-read the `--fit` logs; for a model file, re-centre the work on recent requests."""
        # An evaluation runs at most a bounded simulation; a refit waiting longer answers
        # that it is busy rather than holding POST /v1/model/refit past its deadline.
        if not self.busy.acquire(timeout=REFIT_WAIT_S):
            raise TailbudgetError(
                f"an evaluation of the model has run over {REFIT_WAIT_S:g} s; retry the refit",
                param="refit",
            )
        try:
            how = self._refit()
            self.last_refit = how
            return how
        finally:
            self.busy.release()

    def _refit(self) -> str:
        if self.source.fit_logs:
            self.model, self.fitted_at = load_source(ModelSource(None, self.source.fit_logs))
            how = "refitted from " + ", ".join(self.source.fit_logs)
        else:
            recent = np.concatenate([d[1] for d in self.done]) if self.done else np.zeros(0)
            recent = recent[np.isfinite(recent) & (recent > 0)]
            if recent.size < _REFIT_MIN:
                raise TailbudgetError(
                    f"refit needs at least {_REFIT_MIN} recent observations, have {recent.size}",
                    param="refit",
                )
            s = self.model.samples
            pick = np.random.default_rng(self.refits).integers(0, recent.size, size=s.size)
            samples = replace(s, work_ms=recent[pick])
            self.model = replace(self.model, samples=samples)
            self.fitted_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            how = f"work re-centred on the last {recent.size:,} observed requests"
        self.refits += 1
        old = self.policy
        self.policy = self._policy()
        self.policy.holt, self.policy.last_t = old.holt, old.last_t
        return how

    def status(self, desired: int) -> dict[str, Any]:
        """The `/v1/status` `model` block."""
        p = self.policy
        minute, ahead, sized = p.load
        return {
            "source": self.source.label,
            "fitted_at": self.fitted_at,
            "kind": self.model.kind,
            "parameters": [x.to_dict() for x in self.model.params()],
            "load": {
                "rate_per_s": round(minute, 4),
                "forecast_per_s": round(ahead, 4),
                "sized_for_per_s": round(sized, 4),
                "forecast": "Holt's linear smoothing, one provisioning delay ahead",
            },
            "predicted": {k: round(v, 3) for k, v in p.predicted.items()},
            "measured": {k: round(v, 3) for k, v in p.measured.items()},
            "error": {
                k: round(p.measured[k] / v - 1.0, 4)
                for k, v in p.predicted.items()
                if k in p.measured and v > 0
            },
            "stated_error": self.opts.drift_error,
            "drifting": p.drifting,
            "desired_replicas": p.need,
            "reason": p.why,
            "headroom": self.headroom,
            "refits": self.refits,
            "last_refit": self.last_refit,
            "refit_every_s": self.opts.refit_every_s,
        }
