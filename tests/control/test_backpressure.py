"""Backpressure primitives: token bucket, priority shedder, adaptive concurrency, chain."""

from __future__ import annotations

import threading

import pytest

from tailbudget.control.backpressure import (
    AIMD,
    Chain,
    ConcurrencyLimit,
    Gradient,
    PriorityShedder,
    TokenBucket,
)
from tailbudget.errors import PolicyError
from tailbudget.measure.gate import Admission, Gate


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_all_implement_gate() -> None:
    for g in (TokenBucket(10), PriorityShedder(), ConcurrencyLimit(), Chain([])):
        assert isinstance(g, Gate)


def test_token_bucket_burst_refill_and_retry_after() -> None:
    clock = FakeClock()
    tb = TokenBucket(rate_per_s=5, burst=3, clock=clock)
    assert [tb.try_acquire().allowed for _ in range(4)] == [True, True, True, False]
    refused = tb.try_acquire()
    assert refused.status == 429 and refused.retry_after_s == pytest.approx(0.2)
    clock.t += 0.1  # half a token
    assert tb.try_acquire().retry_after_s == pytest.approx(0.1)
    clock.t += 0.1
    assert tb.try_acquire().allowed
    clock.t += 100  # refills only up to the burst
    assert sum(tb.try_acquire().allowed for _ in range(10)) == 3


def test_token_bucket_rate_over_time() -> None:
    clock = FakeClock()
    tb = TokenBucket(rate_per_s=20, burst=1, clock=clock)
    admitted = 0
    for _ in range(1000):  # 100 req/s offered for 10 s
        clock.t += 0.01
        admitted += tb.try_acquire().allowed
    assert admitted == pytest.approx(200, abs=2)
    tb.set_rate(50, burst=1)
    admitted = 0
    for _ in range(1000):
        clock.t += 0.01
        admitted += tb.try_acquire().allowed
    assert admitted == pytest.approx(500, abs=2)


def test_shedder_sheds_lowest_priority_first() -> None:
    clock = FakeClock()
    s = PriorityShedder(0.0, clock=clock)
    mix = [0, 1, 2, 2] * 500  # 25% priority 0, 25% priority 1, 50% priority 2
    for p in mix:
        assert s.try_acquire(p).allowed
    s.set_fraction(0.4)
    refused = {0: 0, 1: 0, 2: 0}
    for p in mix:
        adm = s.try_acquire(p)
        if not adm.allowed:
            assert adm.status == 503 and adm.retry_after_s > 0
            refused[p] += 1
    # 40% of traffic: all of priority 0 (25%), then 15 of the 25 points of priority 1
    assert refused[0] == 500
    assert refused[1] == pytest.approx(300, abs=2)
    assert refused[2] == 0
    s.set_fraction(0.0)
    assert all(s.try_acquire(p).allowed for p in mix)


def test_shedder_full_and_validation() -> None:
    s = PriorityShedder(1.0)
    assert not any(s.try_acquire(p).allowed for p in (0, 5, 9) * 10)
    with pytest.raises(PolicyError, match=r"shed fraction must be in \[0, 1\]"):
        s.set_fraction(1.5)


def test_concurrency_limit_caps_inflight_across_threads() -> None:
    lim = ConcurrencyLimit(8, min_limit=8, max_limit=8)
    barrier = threading.Barrier(16)
    admitted: list[Admission] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        adm = lim.try_acquire()
        with lock:
            admitted.append(adm)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [a for a in admitted if a.allowed]
    assert len(ok) == 8 and lim.inflight == 8
    assert all(a.status == 503 for a in admitted if not a.allowed)
    for a in ok:
        lim.release(a, latency_s=0.01, ok=True)
    assert lim.inflight == 0


def _drive(lim: ConcurrencyLimit, latency_s: float, rounds: int, ok: bool = True) -> None:
    for _ in range(rounds):
        held = []
        while (a := lim.try_acquire()).allowed:
            held.append(a)
        for a in held:
            lim.release(a, latency_s=latency_s, ok=ok)


def test_gradient_shrinks_when_latency_rises_and_grows_when_it_holds() -> None:
    lim = ConcurrencyLimit(20, min_limit=2, max_limit=200, algorithm=Gradient())
    _drive(lim, 0.05, 20)
    grown = lim.limit
    assert grown > 20  # steady latency: the queue allowance grows the limit
    _drive(lim, 0.5, 1)  # latency 10x: the gradient falls to its floor at once
    assert lim.limit < grown / 2
    shrunk = lim.limit
    _drive(lim, 0.5, 40)  # the long average follows: a new normal, the limit regrows
    assert lim.limit > shrunk


def test_aimd_increase_and_backoff() -> None:
    lim = ConcurrencyLimit(10, min_limit=1, max_limit=100, algorithm=AIMD(timeout_s=0.2))
    _drive(lim, 0.05, 1)
    assert lim.limit > 10
    high = lim.limit
    _drive(lim, 0.05, 1, ok=False)
    assert lim.limit < high
    for _ in range(200):
        _drive(lim, 1.0, 1)  # every request slower than the timeout
    assert lim.limit == 1  # bounded below by min_limit


def test_release_is_safe_with_odd_input() -> None:
    lim = ConcurrencyLimit(2, min_limit=1, max_limit=4)
    lim.release(Admission(False, 503), latency_s=1.0, ok=True)  # a refusal holds no slot
    assert lim.inflight == 0
    a = lim.try_acquire()
    lim.release(a, latency_s=float("nan"), ok=True)  # cancelled: slot back, no sample
    lim.release(a, latency_s=0.1, ok=True)  # double release never goes negative
    assert lim.inflight == 0 and lim.limit == 2


def test_chain_first_refusal_wins_and_cancels_earlier() -> None:
    clock = FakeClock()
    lim = ConcurrencyLimit(1, min_limit=1, max_limit=1)
    chain = Chain([lim, TokenBucket(1, burst=1, clock=clock)])
    a = chain.try_acquire()
    assert a.allowed and lim.inflight == 1
    chain.release(a, latency_s=0.1, ok=True)
    b = chain.try_acquire()  # limit admits, bucket is empty: 429 and the slot is returned
    assert not b.allowed and b.status == 429 and lim.inflight == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: TokenBucket(0),
        lambda: TokenBucket(float("inf")),
        lambda: PriorityShedder(-0.1),
        lambda: ConcurrencyLimit(5, min_limit=10),
    ],
)
def test_constructors_validate(make) -> None:
    with pytest.raises(PolicyError):
        make()
