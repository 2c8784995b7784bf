"""Fitting the continuous-batching model from LLM logs (a benchmark sweep at several loads).

- step time vs sequences decoding at once: each log gives one point, its
  token-weighted TPOT against its mean number decoding (Little's law: the
  offered rate x mean decode time, or total decode time / the run's duration
  when the rate is not known); a line through the points. One load
  level cannot identify the slope (stated default 0).
- the extra time of a step that prefills: each inter-token gap above its
  request's median gap is another request's prefill interrupting the batch;
  their total per arrival (rate x decode time) is the prefill step's cost.
- time outside the engine: the lowest load's TTFT against prompt length,
  minus what the engine adds there (half a step of waiting, one step, the
  prefill cost); its dependence on prompt length stays outside the batch.
- batch limit and token budget per step: never reached at these loads, so not
  identifiable; the defaults are vLLM V1's for its API server
  (max_num_seqs 256, max_num_batched_tokens 2048).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tailbudget.errors import TailbudgetError
from tailbudget.sim.calibrate import cold_slope
from tailbudget.sim.fit import (
    LoggedRequests,
    ModelOptions,
    common_params,
    load_level,
    pooled_samples,
)
from tailbudget.sim.inputs import LLMExtras
from tailbudget.sim.model import (
    DEFAULT_CACHE_BLOCKS,
    DEFAULT_CACHE_NOTE,
    LLMParams,
    Param,
    ServiceModel,
)
from tailbudget.sim.own_runs import own_runs
from tailbudget.sim.refine import refine

__all__ = ["fit_llm_model", "is_llm"]

VLLM_MAX_NUM_SEQS = 256
VLLM_MAX_BATCHED_TOKENS = 2048


def is_llm(logs: Sequence[LoggedRequests]) -> bool:
    """Every log has TTFT, decode and output token counts."""
    return bool(logs) and all(
        lg.ttft_ms is not None and lg.output_tokens is not None and lg.stages
        and "decode" in lg.stages
        for lg in logs
    )  # fmt: skip


def _level(lg: LoggedRequests) -> tuple[float, float] | None:
    """(mean sequences decoding, token-weighted TPOT ms) of one log."""
    assert lg.stages is not None and lg.output_tokens is not None
    dec = lg.stages["decode"]
    steps = np.maximum(lg.output_tokens - 1, 0)
    span = lg.duration_s
    if span is None and lg.ts_s is not None and lg.ts_s.size > 1:
        span = float(lg.ts_s[-1] - lg.ts_s[0]) + float(np.mean(lg.total_ms)) / 1000.0
    if steps.sum() == 0:
        return None
    tpot = float(dec.sum() / steps.sum())
    rate = lg.rate_per_s
    if rate is not None and np.isfinite(rate):  # Little's law at the offered rate
        return rate * float(dec.mean()) / 1000.0, tpot
    if not span:
        return None
    return float(dec.sum()) / 1000.0 / span, tpot


def _step_line(points: list[tuple[float, float]]) -> tuple[Param, Param, dict[str, Any]]:
    n = np.asarray([p[0] for p in points])
    tp = np.asarray([p[1] for p in points])
    quality: dict[str, Any] = {"points": [[round(a, 3), round(b, 3)] for a, b in points]}
    if len(points) < 2 or np.ptp(n) < 1e-9:
        why = "one load level: its median inter-token gap"
        base = Param("step_base_ms", float(tp.mean()), "ms", "fitted", why)
        slope = Param(
            "step_per_seq_ms",
            0.0,
            "ms",
            "default",
            "one load level: how TPOT grows with the batch is not identifiable; give logs "
            "at two or more loads",
        )
        return base, slope, quality
    b, a = np.polyfit(n, tp, 1)
    resid = tp - (a + b * n)
    quality["tpot_residual_ms"] = [round(float(x), 3) for x in resid]
    if len(points) == 2:
        quality["tpot_line"] = "2 load levels: the line passes through both, no residual to judge"
    else:
        ss = float(((tp - tp.mean()) ** 2).sum())
        quality["tpot_r2"] = round(1.0 - float((resid**2).sum()) / ss, 4) if ss else None
    note = f"TPOT = a + b x sequences decoding, through {len(points)} load levels"
    return (
        Param("step_base_ms", max(0.0, float(a)), "ms", "fitted", note),
        Param("step_per_seq_ms", max(0.0, float(b)), "ms", "fitted", note),
        quality,
    )


_BLOCK_TOKENS = 512
_PROBES = 200


def held_tokens(lg: LoggedRequests) -> float:
    """The most KV-cache tokens the log's requests held at once (prompt plus the tokens
    decoded so far, of each request between its first token and its end; decoding taken
    as even), at 200 instants over the run; 0 when the log's arrivals are not known
    (a paced run without times: Little's law gives its mean instead)."""
    if lg.ttft_ms is None or lg.input_tokens is None or lg.output_tokens is None:
        return 0.0
    if lg.ts_s is not None and lg.ts_s.size > 1:
        start = lg.ts_s - lg.ts_s[0]
    elif lg.rate_per_s is not None and not np.isfinite(lg.rate_per_s):
        start = np.zeros(lg.total_ms.size)
    elif lg.rate_per_s is not None:  # Little's law: mean tokens held at the stated rate
        dec_s = np.maximum(lg.total_ms - lg.ttft_ms, 0.0) / 1000.0
        return float(lg.rate_per_s * np.mean(dec_s * (lg.input_tokens + lg.output_tokens / 2)))
    else:
        return 0.0
    first = start + lg.ttft_ms / 1000.0
    end = np.maximum(start + lg.total_ms / 1000.0, first)
    ok = np.isfinite(first) & np.isfinite(end) & ~lg.error
    first, end = first[ok], end[ok]
    prompt, answer = lg.input_tokens[ok], lg.output_tokens[ok]
    if not first.size:
        return 0.0
    span = np.maximum(end - first, 1e-9)
    most = 0.0
    for t in np.linspace(float(first.min()), float(end.max()), _PROBES):
        on = (first <= t) & (t < end)
        done = np.clip((t - first[on]) / span[on], 0.0, 1.0)
        most = max(most, float((prompt[on] + answer[on] * done).sum()))
    return most


def _cache_blocks(logs: Sequence[LoggedRequests], stated: int | None) -> Param:
    """The prefix cache's size per replica: stated, else the default unless the runs held
    more KV at once (the server's cache holds at least what it held)."""
    if stated is not None:
        return Param("prefix_cache_blocks", float(stated), "blocks", "stated")
    held = max((held_tokens(lg) for lg in logs), default=0.0)
    blocks = int(np.ceil(held / _BLOCK_TOKENS))
    if blocks <= DEFAULT_CACHE_BLOCKS:
        note = f"{DEFAULT_CACHE_NOTE}; the fitted runs held at most {blocks:,} blocks at once"
        return Param("prefix_cache_blocks", float(DEFAULT_CACHE_BLOCKS), "blocks", "default", note)
    return Param(
        "prefix_cache_blocks",
        float(blocks),
        "blocks",
        "measured",
        f"the most KV-cache tokens the fitted runs held at once ({held:,.0f}), in 512-token "
        "blocks: the server's cache holds at least that (a lower bound; state "
        "prefix_cache_blocks)",
    )


def _count(value: int | None, name: str, default: int, why: str) -> Param:
    if value is not None:
        return Param(name, float(value), "count", "stated")
    return Param(name, float(default), "count", "default", why)


def _initial(
    logs: Sequence[LoggedRequests], levels: list[tuple[float, float]], opts: ModelOptions
) -> tuple[LLMParams, dict[str, Any]]:
    """First estimates straight from the logs: the decode line through the load levels,
    the lowest load's TTFT against prompt length (cold prefill cost per token and the
    time outside the engine)."""
    base, slope, quality = _step_line(levels)
    rates = [lg.rate_per_s if lg.rate_per_s is not None else np.inf for lg in logs]
    low = logs[int(np.argmin(rates))]
    assert low.ttft_ms is not None and low.input_tokens is not None
    per_token, intercept = cold_slope(low.ttft_ms, low.input_tokens)
    low_n = min(levels)[0] if levels else 0.0
    step_low = base.value + slope.value * low_n
    why = "refined by replaying every fitted run on its own arrivals (fit table)"
    llm = LLMParams(
        step_base_ms=replace(base, note=f"{base.note}; {why}"),
        step_per_seq_ms=slope if slope.source == "default" else replace(slope, note=why),
        prefill_step_ms=Param("prefill_step_ms", 0.0, "ms", "fitted", why),
        prefill_per_token_ms=Param(
            "prefill_per_token_ms",
            max(per_token, 0.005),
            "ms",
            "fitted",
            f"cost of an uncached prompt token in a step: the lowest load's TTFT slope "
            f"({per_token:.4f} ms per token), {why}",
        ),
        fixed_ms=Param(
            "fixed_ms",
            intercept - 1.5 * step_low,
            "ms",
            "fitted",
            f"time outside the engine: the lowest load's TTFT intercept ({intercept:.1f} ms) "
            f"less the engine's; {why}",
        ),
        fixed_per_token_ms=Param(
            "fixed_per_token_ms", 0.0, "ms", "default", "a prompt is charged in the engine"
        ),
        batch_limit=_count(
            opts.batch_limit or opts.concurrency,
            "batch_limit",
            VLLM_MAX_NUM_SEQS,
            "never reached in the logs; vLLM V1's max_num_seqs (state concurrency)",
        ),
        token_budget=_count(
            opts.token_budget,
            "token_budget",
            VLLM_MAX_BATCHED_TOKENS,
            "vLLM V1's API-server max_num_batched_tokens (a burst run identifies it)",
        ),
        step_per_kv_ms=Param(
            "step_per_kv_ms",
            0.0,
            "ms",
            "fitted",
            f"step time per 1,000 context tokens held by the decoding sequences; {why}",
        ),
        ingest_ms=Param(
            "ingest_ms",
            0.0,
            "ms",
            "fitted",
            f"front-end time per request, one at a time (seen when many arrive at once); {why}",
        ),
        prefix_cache_blocks=_cache_blocks(logs, opts.prefix_cache_blocks),
    )
    return llm, quality


def fit_llm_model(
    logs: Sequence[LoggedRequests], extras: Sequence[LLMExtras | None], opts: ModelOptions
) -> ServiceModel:
    """The batching model from one or more LLM logs of the same server."""
    levels = [lvl for lvl in (_level(lg) for lg in logs) if lvl is not None]
    if not levels:
        names = ", ".join(Path(lg.source).name for lg in logs)
        raise TailbudgetError(
            f"{names}: no start times, duration or request rate, so the load the requests "
            "ran at is unknown and the step times cannot be fitted; fit from a log with "
            "timestamps or a benchmark result that states its rate (vLLM bench serve, AIPerf)"
        )
    llm, quality = _initial(logs, levels, opts)
    (cold, window, delay, overhead, share), notes = common_params(logs, opts)
    model = ServiceModel(
        kind="llm",
        samples=pooled_samples(logs),
        concurrency=llm.batch_limit,
        cold_factor=cold,
        cold_window_s=window,
        provision_delay_s=delay,
        logging_overhead_ms=overhead,
        low_priority_share=share,
        llm=llm,
        sources=tuple(lg.source for lg in logs),
        load_levels=tuple(load_level(lg) for lg in logs),
        fit_quality=quality,
        notes=(
            "requests keep their logged prompt and answer lengths; time comes from the model",
            *notes,
        ),
    )
    return refine(model, own_runs(logs, extras), opts, len(levels) >= 2)
