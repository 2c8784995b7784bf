"""Each fitted run replayed on its own arrivals, and the figures it is judged on.

A run's own arrivals are its logged times where it has them, else its benchmark's
`num_prompts` at its `request_rate` (Poisson, the first request at t = 0), all at
once for `inf` (DESIGN.md, "Service model"). Each request keeps its own prompt and
answer lengths, in the order the benchmark sent them. A Poisson run is replayed
on a few seeds and its figures averaged (the benchmark's own seed is not known).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from tailbudget.sim.fit import LoggedRequests
from tailbudget.sim.inputs import LLMExtras
from tailbudget.sim.model import Param, ServiceModel
from tailbudget.sim.replay_one import replay_one
from tailbudget.sim.trace import Arrivals

__all__ = ["FIGURES", "OwnRun", "figures_of", "own_runs", "predict"]

F64 = npt.NDArray[np.float64]

FIGURES = ("ttft.p50", "ttft.p95", "ttft.p99", "tpot.p50", "tpot.p99", "itl.p99", "e2e.p99")
"""The figures a fitted run must reproduce (medians within 10%, tails within 20%)."""


@dataclass(frozen=True)
class OwnRun:
    """One fitted log: what it measured and how it was driven."""

    source: str
    load: str
    """What drove it: '1/s', 'all at once', 'its own times'."""
    rate: float | None
    """Requests/s (inf: all at once); None when the log's times drive it."""
    t_s: F64 | None
    """The logged arrival times (s from the first), when it has them."""
    offset: int
    """Its first row in the pooled samples."""
    input_tokens: F64
    output_tokens: F64
    measured: dict[str, float]
    ttft_ms: F64 | None = None
    """Its logged TTFTs (ms), row by row."""
    itls_ms: tuple[F64, ...] = ()
    """Its inter-token gaps (ms), request by request, when the log has them."""

    @property
    def is_burst(self) -> bool:
        """Every request sent at once (a stated `inf` rate, or logged times within 1 s)."""
        if self.t_s is not None:
            return float(self.t_s[-1]) < 1.0
        return self.rate is not None and not np.isfinite(self.rate)

    @property
    def itl_median(self) -> float:
        """The median inter-token gap (ms), else the median TPOT."""
        if self.itls_ms:
            return float(np.median(np.concatenate(self.itls_ms)))
        return self.measured["tpot.p50"]

    @property
    def size(self) -> int:
        """Requests in the run."""
        return int(self.input_tokens.size)

    @property
    def seeds(self) -> int:
        """Replays to average: one when the arrivals are known exactly."""
        return 3 if self.rate is not None and np.isfinite(self.rate) else 1

    def arrivals(self, seed: int) -> Arrivals:
        """The run's own arrivals (seed: the Poisson draw)."""
        n = self.size
        if self.t_s is not None:
            t = self.t_s
        elif self.rate is None or not np.isfinite(self.rate):
            t = np.zeros(n)
        else:
            gaps = np.random.default_rng(seed).exponential(1.0 / self.rate, size=max(0, n - 1))
            t = np.concatenate([[0.0], np.cumsum(gaps)])
        return Arrivals(
            t_s=np.asarray(t, dtype=np.float64),
            src=self.offset + np.arange(n, dtype=np.int64),
            low_priority=np.zeros(n, dtype=bool),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            description=f"{self.source} at {self.load}",
        )


def _pct(values: F64, q: float) -> float:
    v = values[np.isfinite(values)]
    return float(np.percentile(v, q)) if v.size else float("nan")


def _weighted_pct(values: F64, weights: F64, q: float) -> float:
    if not values.size or not weights.sum():
        return float("nan")
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    k = int(np.searchsorted(cum, q / 100.0 * cum[-1]))
    return float(values[order][min(k, values.size - 1)])


def _tpot(decode_ms: F64, output_tokens: F64) -> F64:
    steps = output_tokens - 1.0
    ok = steps > 0
    return np.asarray(decode_ms[ok] / steps[ok], dtype=np.float64)


def figures_of(
    ttft_ms: F64, e2e_ms: F64, output_tokens: F64, gaps: tuple[F64, F64] | None
) -> dict[str, float]:
    """The FIGURES of one run; `gaps` = (inter-token gaps, how many times each occurred)."""
    tpot = _tpot(e2e_ms - ttft_ms, output_tokens)
    out = {
        "ttft.p50": _pct(ttft_ms, 50),
        "ttft.p95": _pct(ttft_ms, 95),
        "ttft.p99": _pct(ttft_ms, 99),
        "tpot.p50": _pct(tpot, 50),
        "tpot.p99": _pct(tpot, 99),
        "e2e.p99": _pct(e2e_ms, 99),
    }
    if gaps is not None:
        out["itl.p99"] = _weighted_pct(gaps[0], gaps[1], 99)
    return out


def _measured(lg: LoggedRequests, extras: LLMExtras | None) -> dict[str, float]:
    assert lg.ttft_ms is not None and lg.output_tokens is not None
    gaps = None
    if extras is not None and extras.itls_ms:
        flat = np.concatenate(extras.itls_ms)
        gaps = (flat, np.ones(flat.size))
    ok = ~lg.error
    out = figures_of(lg.ttft_ms[ok], lg.total_ms[ok], lg.output_tokens[ok], gaps)
    if gaps is not None:  # every gap once: the audit's interpolated percentile, its figure
        out["itl.p99"] = _pct(gaps[0], 99)
    return out


def _itls(lg: LoggedRequests, extras: LLMExtras | None) -> tuple[F64, ...]:
    if extras is None or len(extras.itls_ms) != lg.total_ms.size:
        return ()
    return extras.itls_ms


def _load_label(rate: float | None) -> str:
    if rate is None:
        return "its own times"
    return "all at once" if not np.isfinite(rate) else f"{rate:g}/s"


def own_runs(logs: Sequence[LoggedRequests], extras: Sequence[LLMExtras | None]) -> list[OwnRun]:
    """Every log whose arrivals are known (its times, or a stated rate), as a run to replay."""
    out, offset = [], 0
    for lg, ex in zip(logs, extras, strict=True):
        times = lg.ts_s is not None and lg.ts_s.size > 1
        rate = None if times else lg.rate_per_s
        if (times or rate is not None) and lg.input_tokens is not None:
            assert lg.output_tokens is not None
            out.append(
                OwnRun(
                    source=lg.source,
                    load=_load_label(rate),
                    rate=rate,
                    t_s=None if not times or lg.ts_s is None else lg.ts_s - lg.ts_s[0],
                    offset=offset,
                    input_tokens=lg.input_tokens,
                    output_tokens=lg.output_tokens,
                    measured=_measured(lg, ex),
                    ttft_ms=lg.ttft_ms,
                    itls_ms=_itls(lg, ex),
                )
            )
        offset += lg.total_ms.size
    return out


def _with_hits(model: ServiceModel, share: float) -> ServiceModel:
    assert model.llm is not None
    hit = replace(model.llm.prefix_hit_rate, value=share)
    return replace(model, llm=replace(model.llm, prefix_hit_rate=hit))


def predict(
    model: ServiceModel, run: OwnRun, hit_share: float, seeds: int | None = None
) -> dict[str, float]:
    """The run's figures as the model predicts them on its own arrivals, one replica,
    with `hit_share` of each prompt cached (mean over the seeds)."""
    m = _with_hits(model, hit_share)
    assert m.llm is not None
    rows = []
    for seed in range(seeds or run.seeds):
        arr = run.arrivals(seed)
        first, done, step_ms, step_seqs, _ = replay_one(
            m.llm, arr.t_s, run.input_tokens, run.output_tokens
        )
        ttft = (first - arr.t_s) * 1000.0
        e2e = (done - arr.t_s) * 1000.0
        rows.append(figures_of(ttft, e2e, run.output_tokens, (step_ms, step_seqs)))
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def stated_share(value: float, note: str) -> Param:
    """A prefix-cache hit share as a parameter."""
    return Param("prefix_hit_rate", value, "share", "stated", note)
