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
from typing import Any

import numpy as np

from tailbudget.errors import TailbudgetError
from tailbudget.sim.fit import (
    LoggedRequests,
    ModelOptions,
    common_params,
    load_level,
    pooled_samples,
)
from tailbudget.sim.inputs import LLMExtras
from tailbudget.sim.model import LLMParams, Param, ServiceModel

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
    if not points:
        raise TailbudgetError(
            "LLM logs need a duration or timestamps to fit step times; none has either"
        )
    n = np.asarray([p[0] for p in points])
    tp = np.asarray([p[1] for p in points])
    quality: dict[str, Any] = {"points": [[round(a, 3), round(b, 3)] for a, b in points]}
    if len(points) < 2 or np.ptp(n) < 1e-9:
        base = Param("step_base_ms", float(tp.mean()), "ms", "fitted", "mean TPOT, one load level")
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


def _prefill_step(extras: Sequence[LLMExtras | None], base_ms: float) -> Param:
    excess = arrivals = 0.0
    for ex in extras:
        if ex is None or not np.isfinite(ex.rate_per_s):
            continue
        for gaps in ex.itls_ms:
            if gaps.size >= 20:
                excess += float(np.clip(gaps - np.median(gaps), 0.0, None).sum())
                arrivals += ex.rate_per_s * float(gaps.sum()) / 1000.0
    if arrivals < 50:
        return Param(
            "prefill_step_ms",
            base_ms,
            "ms",
            "default",
            "no inter-token gaps at a known rate: a prefilling step is taken to cost one more "
            "decode step",
        )
    return Param(
        "prefill_step_ms",
        excess / arrivals,
        "ms",
        "fitted",
        f"inter-token gaps above each request's median, per arrival ({arrivals:,.0f} arrivals)",
    )


def _fixed(lg: LoggedRequests, engine_ms: float) -> tuple[Param, Param, float]:
    assert lg.ttft_ms is not None and lg.input_tokens is not None
    x, y = lg.input_tokens, lg.ttft_ms
    if np.ptp(x) > 0:
        b, a = np.polyfit(x, y, 1)
    else:
        a, b = float(np.mean(y)), 0.0
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - a - b * x) ** 2).sum()) / ss if ss else 0.0
    note = (
        f"lowest load's TTFT = {a:.1f} + {b:.4f} x prompt tokens (r2 {r2:.2f}) less the "
        f"engine's own {engine_ms:.1f} ms"
    )
    fixed = float(a) - engine_ms
    # Below zero, the engine's simulated steps alone take longer than the measured intercept:
    # the difference is taken back so the lowest load's TTFT still matches.
    why = f"{note}; below 0: the engine's steps exceed the intercept" if fixed < 0 else note
    return (
        Param("fixed_ms", fixed, "ms", "fitted", why),
        Param("fixed_per_token_ms", max(0.0, float(b)), "ms", "fitted", note),
        r2,
    )


def _count(value: int | None, name: str, default: int, why: str) -> Param:
    if value is not None:
        return Param(name, float(value), "count", "stated")
    return Param(name, float(default), "count", "default", why)


def fit_llm_model(
    logs: Sequence[LoggedRequests], extras: Sequence[LLMExtras | None], opts: ModelOptions
) -> ServiceModel:
    """The batching model from one or more LLM logs of the same server."""
    levels = [lvl for lvl in (_level(lg) for lg in logs) if lvl is not None]
    base, slope, quality = _step_line(levels)
    prefill = _prefill_step(extras, base.value)
    rates = [lg.rate_per_s if lg.rate_per_s is not None else np.inf for lg in logs]
    low = logs[int(np.argmin(rates))]
    low_n = min(levels)[0] if levels else 0.0
    step_low = base.value + slope.value * low_n
    fixed, fixed_tok, r2 = _fixed(low, 1.5 * step_low + prefill.value)
    quality["ttft_vs_prompt_r2"] = round(r2, 4)
    llm = LLMParams(
        step_base_ms=base,
        step_per_seq_ms=slope,
        prefill_step_ms=prefill,
        prefill_per_token_ms=Param(
            "prefill_per_token_ms",
            0.0,
            "ms",
            "default",
            "the prompt's length is charged outside the batch (fixed_per_token_ms); a "
            "slow run's gaps show about its TTFT slope per token inside a step, but a "
            "prefix-cached burst prefills faster: docs/simulate.md, Accuracy",
        ),
        fixed_ms=fixed,
        fixed_per_token_ms=fixed_tok,
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
            "never reached in the logs; vLLM V1's API-server max_num_batched_tokens",
        ),
    )
    (cold, window, delay, overhead, share), notes = common_params(logs, opts)
    return ServiceModel(
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
