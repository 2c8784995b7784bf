"""The batching engine on one replica with nothing else in the loop: the fit's replays.

Calibration replays every fitted run a few hundred times; the full engine
(batch_engine.py) carries a fleet, a policy and its ticks that one fixed replica
does not need. This loop runs the same steps by the same rules (admission up to the
batch limit, the front end one request at a time, chunked prefill of uncached tokens
within the token budget, one token per decoding sequence per step), so it gives the
same first-token and finish times; tests/sim/test_own_runs.py holds the two equal.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np
import numpy.typing as npt

from tailbudget.sim.model import LLMParams

__all__ = ["replay_one"]

F64 = npt.NDArray[np.float64]


def _fixed_s(p: LLMParams, input_tokens: F64) -> list[float]:
    """Time outside the engine per request (s), as the engine charges it."""
    v = p.fixed_ms.value + p.fixed_per_token_ms.value * np.asarray(input_tokens)
    out: list[float] = (np.maximum(0.0, v) / 1000.0).tolist()
    return out


def replay_one(  # noqa: PLR0915 - one tight loop, kept whole for speed
    p: LLMParams, arrival_s: F64, input_tokens: F64, output_tokens: F64
) -> tuple[F64, F64, F64, F64, F64]:
    """(first-token times, finish times, step times, sequences decoding and context tokens
    they hold per step): s, s, ms, counts, tokens, for `arrival_s` (sorted) on one replica."""
    c0, c1 = p.step_base_ms.value / 1000.0, p.step_per_seq_ms.value / 1000.0
    e0, e1 = p.prefill_step_ms.value / 1000.0, p.prefill_per_token_ms.value / 1000.0
    c2 = p.step_per_kv_ms.value / 1e6
    limit, budget = int(p.batch_limit.value), int(p.token_budget.value)
    ingest = p.ingest_ms.value / 1000.0
    arr = arrival_s.tolist()
    tin = np.maximum(np.asarray(input_tokens) * (1.0 - p.prefix_hit_rate.value), 1.0).tolist()
    tout = np.maximum(np.round(output_tokens), 1).astype(int).tolist()
    fixed = _fixed_s(p, input_tokens)
    prompt = np.maximum(np.asarray(input_tokens, dtype=np.float64), 1.0).tolist()
    ctx = 0.0
    n, inf = len(arr), float("inf")
    first = [0.0] * n
    done = [0.0] * n
    steps: list[float] = []
    seqs_at: list[int] = []
    ctx_at: list[float] = []
    queue: deque[int] = deque()
    pending: deque[tuple[float, int]] = deque()
    prefill: deque[list[float]] = deque()
    decoding: list[tuple[int, int]] = []
    running = seqs = step = nxt = 0
    front = t = 0.0

    def admit(now: float) -> None:
        nonlocal seqs, front
        while queue and seqs < limit:
            i = queue.popleft()
            seqs += 1
            if ingest > 0.0:
                front = max(now, front) + ingest
                pending.append((front, i))
            else:
                prefill.append([i, tin[i]])

    while True:
        admit(t)
        if not prefill and not running:  # idle: the next event, one at a time
            tp = pending[0][0] if pending else inf
            ta = arr[nxt] if nxt < n else inf
            if tp == inf and ta == inf:
                break
            if ta < tp:
                t = ta
                queue.append(nxt)
                nxt += 1
                admit(t)
                if not prefill:
                    continue
            else:
                t = tp
        while pending and pending[0][0] <= t:
            i = pending.popleft()[1]
            prefill.append([i, tin[i]])
        if not prefill and not running:
            continue
        room = float(budget - running)
        tokens = 0.0
        for item in prefill:
            if room <= 0:
                break
            take = min(item[1], room)
            item[1] -= take
            room -= take
            tokens += take
        firsts = []
        while prefill and prefill[0][1] <= 0:
            firsts.append(int(prefill.popleft()[0]))
        dt = c0 + c1 * running + c2 * ctx
        if tokens:
            dt += e0 + e1 * tokens
        if running:
            steps.append(dt)
            seqs_at.append(running)
            ctx_at.append(ctx)
        end = t + dt
        while nxt < n and arr[nxt] < end:  # arrivals during the step, each at its own time
            queue.append(nxt)
            admit(arr[nxt])
            nxt += 1
        t = end
        step += 1
        ctx += running
        finished = 0
        while decoding and decoding[0][0] <= step:
            i = heapq.heappop(decoding)[1]
            ctx -= prompt[i] + tout[i]
            done[i] = t + fixed[i]
            finished += 1
        running -= finished
        for i in firsts:
            first[i] = t + fixed[i]
            if tout[i] <= 1:
                done[i] = t + fixed[i]
                finished += 1
            else:
                heapq.heappush(decoding, (step + tout[i] - 1, i))
                running += 1
                ctx += prompt[i] + 1
        seqs -= finished
    return (
        np.asarray(first),
        np.asarray(done),
        np.asarray(steps) * 1000.0,
        np.asarray(seqs_at, dtype=np.float64),
        np.asarray(ctx_at),
    )
