"""Step 7: hypotheses, each with evidence in words and numbers from the log.

Rules (a stage is "major" when it is the tail driver or holds at least MAJOR_SHARE of the
summed positive slow-minus-fast deltas):

- input_shape: a major stage's latency fits a covariate with R^2 >= 0.5 and a positive
  slope (the covariate is not a fan-out count). When the covariate is an output length
  (generated tokens, see covariates.py) the evidence says so and the fix is
  cap_output_tokens rather than cap_input_size.
- fanout: a major stage's latency fits a fan-out count covariate (its name says shards,
  fanout, calls, partitions, ...) with R^2 >= 0.3 and a positive slope.
- cold_start: events were given and the cold-start verdict is `cold_start` (the one rule,
  in cold_start.py); the stage is the one slowed most in the cold windows.
- contention: over >= 10 minutes, a major stage's per-minute mean rises with the
  per-minute request count (R^2 >= 0.5, positive slope) and the fit predicts the busiest
  tenth of minutes >= 25% slower than the quietest tenth.
- cache_miss: a major stage's quantile function has a gap: between p30 and p95 a
  value is >= 2.5x the one 2.5 percentiles below it, and the slow mode's median is >= 3x
  the fast mode's: a hit/miss mixture, the miss share being the mass above the gap.
- external_dependency: a major stage (not `unattributed`) has p99 >= 5x its p50 with the
  tail not explained by shape, fan-out, load, cold start or a cache gap: rare long stalls,
  the signature of a remote call's timeouts and retries.
- missing_slice: `unattributed` (total minus all stages) is the tail driver or holds
  >= 30% of the slow-fast delta: a hop no stage times.
- llm_prefill: a TTFT/prefill/queue stage's p99 exceeds its budget (the budget's llm
  ttft_ms, else the stage's p99 slice), or without a budget it is the tail driver:
  queueing or prefill; the evidence says which fits (load or input length).
- llm_decode: the 5th percentile of output tokens per second of decode is below the
  budget's tokens_per_s (without one: below half the median rate) while decode is major.
"""

from __future__ import annotations

import re

import numpy as np

from tailbudget import _fmt as fmt
from tailbudget.audit.context import UNATTRIBUTED
from tailbudget.audit.covariates import is_output_length
from tailbudget.audit.evidence import Evidence
from tailbudget.audit.report import Hypothesis
from tailbudget.audit.snapshot import at
from tailbudget.audit.stages import STAGE_QS

MAJOR_SHARE = 0.10
R2_SHAPE = 0.5
R2_FANOUT = 0.3
R2_LOAD = 0.5
LOAD_EFFECT = 0.25
MIN_MINUTES = 10
GAP_RATIO = 2.5
MODE_RATIO = 3.0
TAIL_RATIO = 5.0
MISSING_SHARE = 0.30

FANOUT_NAME = re.compile(r"(fan_?out|shard|partition|n_calls|num_calls|calls|replicas|hops)", re.I)
TTFT_NAME = re.compile(r"(^|_)(ttft|prefill|queue|queue_wait|time_to_first_token)$", re.I)
DECODE_NAME = re.compile(r"(^|_)(decode|generation|itl)$", re.I)


def major_stages(ev: Evidence) -> list[str]:
    """The driver plus stages holding a large share of the slow-fast delta."""
    out = [ev.tail.driver] if ev.tail.driver else []
    for d in ev.tail.deltas:
        if d.stage not in out and d.delta > 0 and ev.delta_share(d.stage) >= MAJOR_SHARE:
            out.append(d.stage)
    return out


def find(
    ev: Evidence, llm_budgets: dict[str, float] | None = None, tps_budget: float | None = None
) -> list[Hypothesis]:
    """All hypotheses the evidence supports, strongest evidence first within each rule."""
    majors = major_stages(ev)
    out: list[Hypothesis] = []
    explained: set[str] = set()
    out += _shape(ev, majors, explained)
    out += _cold(ev, explained)
    out += _contention(ev, majors, explained)
    out += _cache(ev, majors, explained)
    llm = _llm(ev, majors, llm_budgets or {}, tps_budget)
    explained.update(h.stage for h in llm if h.stage)
    out += _external(ev, majors, explained)
    out += _missing(ev)
    return out + llm


def _shape(ev: Evidence, majors: list[str], explained: set[str]) -> list[Hypothesis]:
    out = []
    seen: set[str] = set()
    for row in ev.shape:  # strongest fit first
        if row.stage not in majors or row.slope <= 0 or row.stage in seen:
            continue
        fan = bool(FANOUT_NAME.search(row.covariate))
        if row.r2 < (R2_FANOUT if fan else R2_SHAPE):
            continue
        cov = next(c for c in ev.covariates if c.name == row.covariate)
        cap = cov.p50 if fan else cov.p95
        kind = "fanout" if fan else "input_shape"
        seen.add(row.stage)
        explained.add(row.stage)
        # "per output token (output_tokens)", not "per unit of output length output_tokens"
        if fan:
            what = f"fan-out call ({row.covariate}"
        elif is_output_length(row.covariate):
            what = f"output token ({row.covariate}"
        else:
            what = f"unit of {row.covariate} ("
        out.append(
            Hypothesis(
                kind=kind,
                stage=row.stage,
                evidence=(
                    f"{row.stage} rises {row.slope:,.3g} ms per {what}"
                    f"{'' if what.endswith('(') else ', '}R² {row.r2:.2f}); {row.covariate} "
                    f"median {cov.p50:,.4g}, p95 {cov.p95:,.4g}"
                ),
                covariate=row.covariate,
                figures={
                    "r2": row.r2,
                    "slope": row.slope,
                    "cap": cap,
                    "p50": cov.p50,
                    "p95": cov.p95,
                },
            )
        )
    return out


def _cold(ev: Evidence, explained: set[str]) -> list[Hypothesis]:
    cs = ev.cold
    if cs is None or cs.filtered_p99 is None or cs.n_cold == 0:
        return []
    drop = (cs.unfiltered_p99 - cs.filtered_p99) / cs.unfiltered_p99 if cs.unfiltered_p99 else 0.0
    if cs.verdict != "cold_start":
        return []
    stage = None
    if ev.cold_stage_means:
        stage = max(
            ev.cold_stage_means, key=lambda s: ev.cold_stage_means[s][0] - ev.cold_stage_means[s][1]
        )
        explained.add(stage)
    figures = {
        "unfiltered_p99": cs.unfiltered_p99,
        "filtered_p99": cs.filtered_p99,
        "n_cold": float(cs.n_cold),
    }
    where = ""
    if stage is not None:
        cold_m, warm_m = ev.cold_stage_means[stage]
        figures |= {"cold_mean": cold_m, "warm_mean": warm_m}
        where = f"; {stage} averages {cold_m:,.0f} ms in those windows vs {warm_m:,.0f} ms outside"
    if ev.cold_total_means:
        figures |= {
            "cold_total_mean": ev.cold_total_means[0],
            "warm_total_mean": ev.cold_total_means[1],
        }
    return [
        Hypothesis(
            kind="cold_start",
            stage=stage,
            evidence=(
                f"{cs.n_cold:,} requests arrived within {cs.window_min:g} min after "
                f"{len(cs.events)} events; p99 {cs.unfiltered_p99:,.0f} ms with them, "
                f"{cs.filtered_p99:,.0f} ms without ({drop:.0%} lower){where}"
            ),
            figures=figures,
        )
    ]


def load_fit(ev: Evidence, stage: str) -> tuple[float, float, float, list[float]] | None:
    """(slope ms per request/min, intercept, R^2, per-minute counts) of a stage's minute means."""
    if stage not in ev.names or len(ev.timeline) < MIN_MINUTES:
        return None
    j = ev.names.index(stage)
    rows = [r for r in ev.timeline if r.get(f"m{j}") is not None]
    if len(rows) < MIN_MINUTES:
        return None
    n = np.array([float(r["n"]) for r in rows])
    y = np.array([float(r[f"m{j}"]) for r in rows])
    if n.var() == 0 or y.var() == 0:
        return None
    slope = float(np.cov(n, y, bias=True)[0, 1] / n.var())
    r2 = float(np.corrcoef(n, y)[0, 1] ** 2)
    return slope, float(y.mean() - slope * n.mean()), r2, n.tolist()


def _contention(ev: Evidence, majors: list[str], explained: set[str]) -> list[Hypothesis]:
    out = []
    for stage in majors:
        if stage in explained or stage == UNATTRIBUTED:
            continue
        fit = load_fit(ev, stage)
        if fit is None:
            continue
        slope, icept, r2, counts = fit
        lo, hi = np.percentile(counts, [10, 90])
        y_lo, y_hi = icept + slope * lo, icept + slope * hi
        if r2 < R2_LOAD or slope <= 0 or y_lo <= 0 or y_hi < (1 + LOAD_EFFECT) * y_lo:
            continue
        explained.add(stage)
        out.append(
            Hypothesis(
                kind="contention",
                stage=stage,
                evidence=(
                    f"{stage}'s per-minute mean rises with traffic: {slope:,.3g} ms per extra "
                    f"request/min (R² {r2:.2f} over {len(counts)} minutes); fitted "
                    f"{y_lo:,.0f} ms at {lo:,.0f} req/min vs {y_hi:,.0f} ms at {hi:,.0f} req/min"
                ),
                figures={
                    "slope": slope,
                    "r2": r2,
                    "n_ref": float(np.median(counts)),
                    "y_lo": y_lo,
                    "y_hi": y_hi,
                },
            )
        )
    return out


def cache_gap(grid: list[float]) -> tuple[float, float, float, float] | None:
    """(miss share, threshold ms, fast-mode median, slow-mode median) or None."""
    if len(grid) != len(STAGE_QS):
        return None
    best = None
    for k in range(len(STAGE_QS) - 2):
        q = STAGE_QS[k]
        # The slow mode must hold at least 5% of requests; rarer stalls are not a cache.
        if not q >= 0.30 or STAGE_QS[k + 1] > 0.95 or grid[k] <= 0:
            continue
        ratio = grid[k + 1] / grid[k]
        if ratio >= GAP_RATIO and (best is None or ratio > best[0]):
            best = (ratio, k)
    if best is None:
        return None
    k = best[1]
    q_gap = (STAGE_QS[k] + STAGE_QS[k + 1]) / 2
    hit = at(STAGE_QS, grid, STAGE_QS[k] / 2)
    miss = at(STAGE_QS, grid, min((1 + STAGE_QS[k + 1]) / 2, 0.99))
    if hit <= 0 or miss < MODE_RATIO * hit:
        return None
    threshold = (grid[k] * grid[k + 1]) ** 0.5  # the gap's middle, in log space
    return 1 - q_gap, threshold, hit, miss


def _cache(ev: Evidence, majors: list[str], explained: set[str]) -> list[Hypothesis]:
    out = []
    for stage in majors:
        if stage in explained or stage == UNATTRIBUTED or stage not in ev.grids:
            continue
        gap = cache_gap(ev.grids[stage])
        if gap is None:
            continue
        share, thr, hit, miss = gap
        explained.add(stage)
        out.append(
            Hypothesis(
                kind="cache_miss",
                stage=stage,
                evidence=(
                    f"{stage} is bimodal: {1 - share:.0%} of requests take about {hit:,.0f} ms, "
                    f"the other {share:.0%} about {miss:,.0f} ms ({miss / hit:.1f}x), "
                    f"with a gap at {thr:,.0f} ms: a hit/miss split"
                ),
                figures={"miss_share": share, "threshold": thr, "hit_ms": hit, "miss_ms": miss},
            )
        )
    return out


def _external(ev: Evidence, majors: list[str], explained: set[str]) -> list[Hypothesis]:
    out = []
    for stage in majors:
        row = ev.stage(stage)
        if stage in explained or stage == UNATTRIBUTED or row is None or row.p50 <= 0:
            continue
        ratio = row.p99 / row.p50
        if ratio < TAIL_RATIO:
            continue
        explained.add(stage)
        out.append(
            Hypothesis(
                kind="external_dependency",
                stage=stage,
                evidence=(
                    f"{stage} has a long tail unexplained by shape, load, cold start or a cache "
                    f"split: p50 {row.p50:,.0f} ms, p95 {row.p95:,.0f} ms, p99 {row.p99:,.0f} ms "
                    f"({ratio:.1f}x p50): stalls, timeouts or retries of a remote call"
                ),
                figures={"p50": row.p50, "p95": row.p95, "p99": row.p99, "ratio": ratio},
            )
        )
    return out


def _missing(ev: Evidence) -> list[Hypothesis]:
    d = next((d for d in ev.tail.deltas if d.stage == UNATTRIBUTED), None)
    if d is None or d.delta <= 0:
        return []
    share = ev.delta_share(UNATTRIBUTED)
    if ev.tail.driver != UNATTRIBUTED and share < MISSING_SHARE:
        return []
    return [
        Hypothesis(
            kind="missing_slice",
            stage=UNATTRIBUTED,
            evidence=(
                f"unattributed time (total minus every stage) is {fmt.ms(d.mean_slow)} ms in "
                f"slow requests vs {fmt.ms(d.mean_fast)} ms in fast ones "
                f"({fmt.share(share, 0)} of the slow-fast gap): a hop no stage times drives "
                "the tail"
            ),
            figures={"mean_slow": d.mean_slow, "mean_fast": d.mean_fast, "share": share},
        )
    ]


def _llm(
    ev: Evidence, majors: list[str], ttft_budgets: dict[str, float], tps_budget: float | None
) -> list[Hypothesis]:
    out = []
    for row in ev.stages:
        if not TTFT_NAME.search(row.name):
            continue
        budget = ttft_budgets.get(row.name)
        over = row.p99 > budget if budget is not None else ev.tail.driver == row.name
        if not over:
            continue
        why = []
        fit = load_fit(ev, row.name)
        if fit is not None and fit[2] >= R2_LOAD and fit[0] > 0:
            why.append(f"it rises with traffic (R² {fit[2]:.2f}): queueing")
        # Only an input size can explain prefill: tokens not generated yet cannot slow the
        # first one, so a fit on an output length is a confound (long prompts, long answers).
        shp = next(
            (
                s
                for s in ev.shape
                if s.stage == row.name and s.slope > 0 and not is_output_length(s.covariate)
            ),
            None,
        )
        if shp is not None and shp.r2 >= R2_FANOUT:
            why.append(f"it rises with {shp.covariate} (R² {shp.r2:.2f}): prefill")
        cite = (
            f" against a budget of {budget:,.0f} ms" if budget is not None else ", the tail driver"
        )
        out.append(
            Hypothesis(
                kind="llm_prefill",
                stage=row.name,
                evidence=(
                    f"time to first token p99 is {row.p99:,.0f} ms{cite}; "
                    + ("; ".join(why) if why else "neither traffic nor input length explains it")
                ),
                figures={"p99": row.p99, **({"budget": budget} if budget is not None else {})},
            )
        )
    if ev.tokens_per_s is not None:
        p5, p50 = ev.tokens_per_s
        decode = next((s for s in ev.stages if DECODE_NAME.search(s.name)), None)
        limit = tps_budget if tps_budget is not None else 0.5 * p50
        if decode is not None and p5 < limit and (decode.name in majors or tps_budget is not None):
            out.append(
                Hypothesis(
                    kind="llm_decode",
                    stage=decode.name,
                    evidence=(
                        f"decode runs at {p50:,.1f} tokens/s at the median but {p5:,.1f} tokens/s "
                        f"for the slowest 5% of requests (limit {limit:,.1f}): batching or "
                        "memory-bandwidth pressure during decode"
                    ),
                    figures={"tps_p5": p5, "tps_p50": p50, "limit": limit},
                )
            )
    return out
