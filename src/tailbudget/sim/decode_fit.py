"""The decode step from the runs' inter-token gaps: step = base + per_seq x n + per_kv x ctx.

n is the number of sequences decoding in a step and ctx the context tokens they
hold (attention reads each one's KV cache). Two kinds of observation:

- a burst (every request sent at t = 0) gives them exactly: each request's token
  times are its TTFT plus its gaps, so at any moment the sequences decoding, their
  context and their current gaps are known; the median gap is the step time there,
  sampled every quarter second after the last first token (no prefill interrupts);
- a paced run gives one point: its median gap against the token-weighted mean n and
  ctx of the decode-only steps of its replay (the replay knows what the log cannot).

Each run weighs the same; the line is a non-negative least-squares fit. Without a
burst and with under three runs, ctx is not told apart from n (per_kv stays 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["burst_points", "decode_line"]

F64 = npt.NDArray[np.float64]
_EVERY_S = 0.25


def burst_points(
    ttft_ms: F64, input_tokens: F64, itls_ms: Sequence[F64]
) -> list[tuple[float, float, float]]:
    """(n, ctx tokens, median gap ms) every quarter second of a burst's decode phase."""
    times = [t0 + np.cumsum(g) for t0, g in zip(ttft_ms, itls_ms, strict=True)]
    ends = np.asarray([t[-1] if t.size else t0 for t, t0 in zip(times, ttft_ms, strict=True)])
    start, stop = float(np.max(ttft_ms)), float(np.max(ends))
    out = []
    for now in np.arange(start + 1.0, stop, _EVERY_S * 1000.0):
        gaps, ctx = [], 0.0
        for t, t0, prompt, g in zip(times, ttft_ms, input_tokens, itls_ms, strict=True):
            if t0 <= now < (t[-1] if t.size else t0):
                k = int(np.searchsorted(t, now))
                gaps.append(float(g[k]))
                ctx += float(prompt) + k + 1
        if len(gaps) >= 3:
            out.append((float(len(gaps)), ctx, float(np.median(gaps))))
    return out


def decode_line(
    groups: Sequence[Sequence[tuple[float, float, float]]],
) -> tuple[float, float, float]:
    """(base ms, ms per sequence, ms per 1,000 context tokens) through every run's points
    (one group per run, each group weighing the same)."""
    # A start-up guard: scipy loads on first use, not with this module.
    from scipy.optimize import nnls

    rows, ys, ws = [], [], []
    for pts in groups:
        for n, ctx, y in pts:
            rows.append((1.0, n, ctx / 1000.0))
            ys.append(y)
            ws.append(1.0 / np.sqrt(len(pts)))
    a = np.asarray(rows) * np.asarray(ws)[:, None]
    b = np.asarray(ys) * np.asarray(ws)
    use_kv = sum(len(g) > 1 for g in groups) >= 1 or len(groups) >= 3
    if not use_kv:
        a = a[:, :2]
    coef, _ = nnls(a, b)
    if not use_kv:
        coef = np.append(coef, 0.0)
    return float(coef[0]), float(coef[1]), float(coef[2])
