"""The LLM engine: continuous batching per replica, one shared admission queue.

Each replica runs steps back to back while it has work. A step decodes one
token for every running sequence and prefills queued prompts (chunked) within
the token budget; its time follows `LLMParams`. A request waits in the shared
queue until some replica has fewer than `batch_limit` sequences, is prefilled
in the following steps, gets its first token at the end of the step that
finishes its prompt, then one token per step. A decoding sequence's finish is
kept as a step number in a heap, so a step costs O(log n) per finishing
request, not O(running sequences).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque

import numpy as np

from tailbudget.control.decision import Decision
from tailbudget.sim.fleet import Fleet, Knobs, TickView
from tailbudget.sim.hit_levels import share_for
from tailbudget.sim.model import LLMParams, ServiceModel
from tailbudget.sim.trace import Arrivals, RunPolicy, SimTrace, TickRecord

__all__ = ["run_batching"]

_INF = float("inf")
BLOCK_TOKENS = 512
"""Tokens per KV-cache block in a Mooncake trace's `hash_ids`."""


class _Replica:
    __slots__ = (
        "ctx", "decoding", "firsts", "front", "lru", "pending", "prefill", "running", "seqs",
        "step", "stepping",
    )  # fmt: skip

    def __init__(self) -> None:
        self.prefill: deque[list[float]] = deque()  # [request, uncached prompt tokens left]
        self.pending: deque[tuple[float, int]] = deque()  # (schedulable at, request)
        self.front = 0.0  # when the replica's front end (API server) is free
        self.ctx = 0.0  # context tokens the decoding sequences hold
        self.lru: OrderedDict[int, None] = OrderedDict()  # KV blocks cached, oldest first
        self.decoding: list[tuple[int, int]] = []  # (finish step, request)
        self.firsts: list[int] = []
        self.running = 0
        self.seqs = 0
        self.step = 0
        self.stepping = False


class _BatchSim:
    comp_i: list[int]
    """The request of each completion (its class code for the policy's view)."""

    def __init__(
        self,
        model: ServiceModel,
        arrivals: Arrivals,
        policy: RunPolicy,
        replicas: int,
        record_steps: bool = False,
    ) -> None:
        assert model.llm is not None
        p: LLMParams = model.llm
        self.c0, self.c1 = p.step_base_ms.value / 1000.0, p.step_per_seq_ms.value / 1000.0
        self.c2 = p.step_per_kv_ms.value / 1e6  # per 1,000 tokens, in s per token
        self.e0, self.e1 = p.prefill_step_ms.value / 1000.0, p.prefill_per_token_ms.value / 1000.0
        self.limit, self.budget = int(p.batch_limit.value), int(p.token_budget.value)
        self.ingest = p.ingest_ms.value / 1000.0
        self.steps: tuple[list[float], list[int]] | None = ([], []) if record_steps else None
        s = model.samples
        tin = (
            arrivals.input_tokens
            if arrivals.input_tokens is not None
            else _tok(s.input_tokens, arrivals)
        )
        tout = (
            arrivals.output_tokens
            if arrivals.output_tokens is not None
            else _tok(s.output_tokens, arrivals)
        )
        # the fitted runs' hit share at this load: a step charges the uncached tokens only
        self.tin = np.maximum(
            np.asarray(tin) * (1.0 - share_for(p, arrivals.t_s, replicas)), 1.0
        ).tolist()
        self.tout = np.maximum(np.round(tout), 1).astype(int).tolist()
        self.prompt = np.maximum(np.asarray(tin, dtype=np.float64), 1.0).tolist()
        self.blocks, self.hit_tokens = arrivals.blocks, 0.0
        self.cache_blocks = max(1, int(p.prefix_cache_blocks.value))  # per replica, LRU
        self.tin = self.tin if self.blocks is None else list(self.prompt)  # the trace's hits
        fixed = np.maximum(0.0, p.fixed_ms.value + p.fixed_per_token_ms.value * np.asarray(tin))
        self.fixed = (fixed / 1000.0).tolist()
        self.cold = float(model.cold_factor.value)
        self.arr = arrivals.t_s.tolist()
        self.low, self.codes = arrivals.shed_codes().tolist(), arrivals.class_code
        self.err = s.error[arrivals.src].tolist()
        n = len(self.arr)
        self.first = [math.nan] * n
        self.done = [math.nan] * n
        self.shed = [False] * n
        self.policy, self.knobs = policy, Knobs(desired=replicas)
        self.fleet = Fleet(
            float(model.provision_delay_s.value), float(model.cold_window_s.value), self._ready
        )
        self.reps: list[_Replica] = []
        self.queue: deque[int] = deque()
        self.heap: list[tuple[float, int, bool]] = []  # (time, replica, a wake-up)
        self.in_sys = self.seqs_total = 0
        self.area_sys = self.area_busy = 0.0
        self.last_t = 0.0
        # completions: time, e2e ms, error, ttft ms, tpot ms; and each one's request
        self.comp: tuple[list[float], list[float], list[bool], list[float], list[float]]
        self.comp, self.comp_i = ([], [], [], [], []), []
        self.ticks: list[TickRecord] = []
        self.decisions: list[Decision] = []
        self.cold_starts = 0

    def _advance(self, t: float) -> None:
        dt = t - self.last_t
        self.area_sys += self.in_sys * dt
        self.area_busy += self.seqs_total * dt
        self.last_t = t

    def _ready(self, r: int, t: float) -> None:
        while len(self.reps) <= r:
            self.reps.append(_Replica())
        if self.fleet.warm_at[r] > self.fleet.ready_at[r]:
            self.cold_starts += 1
        self._admit(t)

    def _admit(self, t: float) -> None:
        """Move queued requests to the least-loaded ready replicas with room; start those
        idle once every request that fits is placed (a step takes all of them)."""
        fleet, q = self.fleet, self.queue
        idle: list[int] = []
        while q:
            best, load = -1, self.limit
            for r, rep in enumerate(self.reps):
                if rep.seqs < load and not fleet.retired[r] and fleet.ready_at[r] <= t:
                    best, load = r, rep.seqs
            if best < 0:
                break
            i = q.popleft()
            rep = self.reps[best]
            if self.blocks is not None:
                self.tin[i] = self._uncached(rep, i)
            if self.ingest > 0.0:  # the front end takes requests one at a time
                rep.front = max(t, rep.front) + self.ingest
                rep.pending.append((rep.front, i))
            else:
                rep.prefill.append([i, self.tin[i]])
            rep.seqs += 1
            self.seqs_total += 1
            if not rep.stepping:
                idle.append(best)
        for r in idle:
            if not self.reps[r].stepping:
                self._step(r, t)

    def _uncached(self, rep: _Replica, i: int) -> float:
        """Prompt tokens request i must compute on `rep`: its leading blocks found in the
        replica's LRU are hits (a prefix cache matches a prefix); all its blocks are then
        the most recent, the oldest beyond the cache's size evicted."""
        ids, lru = self.blocks[i], rep.lru  # type: ignore[index]
        hit = 0
        for b in ids:
            if b not in lru:
                break
            hit += 1
        for b in ids:
            lru[b] = None
            lru.move_to_end(b)
        while len(lru) > self.cache_blocks:
            lru.popitem(last=False)
        prompt: float = self.prompt[i]
        cached = min(hit * BLOCK_TOKENS, prompt - 1.0)
        self.hit_tokens += cached
        return max(1.0, prompt - cached)

    def _step(self, r: int, t: float) -> None:
        """Start one step of replica r at t (or wait for its front end's next request)."""
        rep = self.reps[r]
        pend = rep.pending
        while pend and pend[0][0] <= t:
            i = pend.popleft()[1]
            rep.prefill.append([i, self.tin[i]])
        if not rep.prefill and not rep.running:
            if pend:  # nothing to compute until the front end hands over the next request
                heapq.heappush(self.heap, (pend[0][0], r, True))
            return
        room = float(self.budget - rep.running)
        tokens = 0.0
        for item in rep.prefill:
            if room <= 0:
                break
            take = min(item[1], room)
            item[1] -= take
            room -= take
            tokens += take
        while rep.prefill and rep.prefill[0][1] <= 0:
            rep.firsts.append(int(rep.prefill.popleft()[0]))
        dt = self.c0 + self.c1 * rep.running + self.c2 * rep.ctx
        if tokens:
            dt += self.e0 + self.e1 * tokens
        if t < self.fleet.warm_at[r]:
            dt *= self.cold
        if self.steps is not None and rep.running:
            self.steps[0].append(dt)
            self.steps[1].append(rep.running)
        rep.stepping = True
        heapq.heappush(self.heap, (t + dt, r, False))

    def _step_end(self, t: float, r: int) -> None:
        rep, fleet = self.reps[r], self.fleet
        rep.step += 1
        rep.ctx += rep.running
        finished = 0
        dec = rep.decoding
        while dec and dec[0][0] <= rep.step:
            i = heapq.heappop(dec)[1]
            rep.ctx -= self.prompt[i] + self.tout[i]
            self._complete(i, t)
            finished += 1
        rep.running -= finished
        for i in rep.firsts:
            self.first[i] = t + self.fixed[i]
            if self.tout[i] <= 1:
                self._complete(i, t)
                finished += 1
            else:
                heapq.heappush(dec, (rep.step + self.tout[i] - 1, i))
                rep.running += 1
                rep.ctx += self.prompt[i] + 1
        rep.firsts = []
        if finished:
            self._advance(t)
            rep.seqs -= finished
            self.seqs_total -= finished
            self.in_sys -= finished
        rep.stepping = False
        if fleet.retired[r] and rep.seqs == 0:
            fleet.end(r, t)
            return
        if finished:
            self._admit(t)
        if rep.seqs and not rep.stepping:
            self._step(r, t)

    def _complete(self, i: int, t: float) -> None:
        done = t + self.fixed[i]
        self.done[i] = done
        self.comp[0].append(done)
        self.comp[1].append((done - self.arr[i]) * 1000.0)
        self.comp[2].append(self.err[i])
        self.comp_i.append(i)
        self.comp[3].append((self.first[i] - self.arr[i]) * 1000.0)
        # the tpot window's value, as serve takes an observation's (0 for a one-token answer)
        steps = self.tout[i] - 1
        self.comp[4].append((done - self.first[i]) * 1000.0 / steps if steps > 0 else 0.0)

    def _arrive(self, i: int, t: float) -> None:
        if self.knobs.shed and self.low[i] in self.knobs.shed_codes:
            self.shed[i] = True
            return
        self._advance(t)
        self.in_sys += 1
        self.queue.append(i)
        self._admit(t)

    def _tick(self, t: float, upto: int) -> int:
        self._advance(t)
        span = max(self.policy.every_s, 1e-9)
        ready = self.fleet.ready_count(t)
        c = self.comp
        view = TickView(
            t, np.asarray(c[0][upto:]), np.asarray(c[1][upto:]), np.asarray(c[2][upto:], bool),
            self.area_sys / span, self.area_busy / span / max(1, ready * self.limit),
            ready, self.fleet.alive(t), np.asarray(c[3][upto:]), np.asarray(c[4][upto:]),
            None if self.codes is None else self.codes[self.comp_i[upto:]],
        )  # fmt: skip
        self.area_sys = self.area_busy = 0.0
        self.decisions.extend(self.policy.tick(view, self.knobs))
        _, gone = self.fleet.reconcile(max(0, self.knobs.desired), t)
        for r in gone:
            if r >= len(self.reps) or self.reps[r].seqs == 0:
                self.fleet.end(r, t)
        self._admit(t)
        self.ticks.append(
            TickRecord(t, self.fleet.ready_count(t), self.fleet.alive(t), self.knobs.shed, False)
        )
        return len(c[0])

    def run(self, replicas: int, t0: float, end_s: float) -> SimTrace:
        self.last_t = t0
        self.fleet.start(replicas, t0)
        for r in range(replicas):
            self._ready(r, t0)
        arr, heap, n = self.arr, self.heap, len(self.arr)
        nxt, every, upto = 0, self.policy.every_s, 0
        tick = t0 + every
        while True:
            ta = arr[nxt] if nxt < n else _INF
            te = heap[0][0] if heap else _INF
            tr = self.fleet.next_ready()
            t = min(ta, te, tr)
            if tick <= t and tick <= end_s:
                upto = self._tick(tick, upto)
                tick += every
                continue
            if t == _INF:
                break
            if tr <= te and tr <= ta:
                self.fleet.ready_due(tr)
            elif te <= ta:
                _, r, wake = heapq.heappop(heap)
                if not wake:
                    self._step_end(te, r)
                elif not self.reps[r].stepping:
                    self._step(r, te)
            else:
                self._arrive(nxt, ta)
                nxt += 1
        return SimTrace(
            arrival_s=np.asarray(self.arr, dtype=np.float64),
            done_s=np.asarray(self.done, dtype=np.float64),
            ttft_s=np.asarray(self.first, dtype=np.float64),
            src=np.zeros(0, dtype=np.int64),
            shed=np.asarray(self.shed, dtype=bool),
            error=np.asarray(self.err, dtype=bool),
            output_tokens=np.asarray(self.tout, dtype=np.float64),
            ticks=self.ticks,
            decisions=self.decisions,
            replica_s=self.fleet.replica_seconds(end_s),
            end_s=end_s,
            cold_starts=self.cold_starts,
            step_ms=None if self.steps is None else np.asarray(self.steps[0]) * 1000.0,
            step_seqs=None if self.steps is None else np.asarray(self.steps[1], dtype=np.float64),
            prefix_hits=None
            if self.blocks is None or not self.prompt
            else self.hit_tokens / float(sum(self.prompt)),
        )


def _tok(values: np.ndarray | None, arrivals: Arrivals) -> np.ndarray:
    if values is None:
        return np.ones(arrivals.size)
    return np.asarray(values, dtype=np.float64)[arrivals.src]


def run_batching(
    model: ServiceModel,
    arrivals: Arrivals,
    policy: RunPolicy,
    *,
    replicas: int,
    end_s: float,
    record_steps: bool = False,
) -> SimTrace:
    """Simulate `arrivals` on an LLM service with continuous batching; `record_steps` keeps
    every step's time and decoding sequences (the inter-token gaps they saw)."""
    sim = _BatchSim(model, arrivals, policy, replicas, record_steps)
    t0 = min(float(arrivals.t_s[0]), 0.0) if arrivals.size else 0.0
    trace = sim.run(replicas, t0, end_s)
    return SimTrace(**{**trace.__dict__, "src": arrivals.src})
