"""Backpressure in-process: rate limit, priority load shedding, adaptive concurrency.

Each primitive implements `tailbudget.measure.gate.Gate`: `try_acquire(priority)`
is cheap, thread-safe and never raises (a fault admits the request and is
logged: instrumentation must not break a request); `release` reports an
admitted request's latency and outcome. A release with a non-finite latency
means "cancelled, no sample" (used by `Chain` when a later gate refuses).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailbudget.budget.classes import CLASS_NAME, OTHER
from tailbudget.control.class_shedding import ShedOrder
from tailbudget.errors import PolicyError
from tailbudget.measure.gate import ADMIT, Admission, Gate

__all__ = [
    "AIMD",
    "Chain",
    "ConcurrencyLimit",
    "Gradient",
    "PriorityShedder",
    "TokenBucket",
]

log = logging.getLogger("tailbudget.control.backpressure")
Clock = Callable[[], float]


def _positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        raise PolicyError(
            f"{name} must be a {'non-negative' if allow_zero else 'positive'} number, got {value!r}"
        )
    return float(value)


class TokenBucket:
    """Rate limiter: `rate_per_s` sustained, `burst` at once; refusals are 429 + Retry-After."""

    def __init__(
        self, rate_per_s: float, burst: float | None = None, *, clock: Clock = time.monotonic
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.rate_per_s = _positive("rate_per_s", rate_per_s)
        self.burst = _positive("burst", burst if burst is not None else max(1.0, rate_per_s))
        self._tokens = self.burst
        self._at = clock()

    def set_rate(self, rate_per_s: float, burst: float | None = None) -> None:
        """Change the limit (an action may tighten or relax it live)."""
        rate = _positive("rate_per_s", rate_per_s)
        size = _positive("burst", burst if burst is not None else max(1.0, rate))
        with self._lock:
            self._refill()
            self.rate_per_s, self.burst = rate, size
            self._tokens = min(self._tokens, size)

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + max(0.0, now - self._at) * self.rate_per_s)
        self._at = now

    def try_acquire(self, priority: int = 0) -> Admission:
        """Take a token, or refuse with 429 and the seconds until one is free."""
        try:
            with self._lock:
                self._refill()
                if self._tokens >= 1.0 - 1e-9:  # float refills land a hair below 1
                    self._tokens = max(0.0, self._tokens - 1.0)
                    return ADMIT
                wait = (1.0 - self._tokens) / self.rate_per_s
            return Admission(False, 429, wait, f"rate limited at {self.rate_per_s:g}/s")
        except Exception:  # never break a request
            log.exception("token bucket failed; admitting")
            return ADMIT

    def release(self, admission: Admission, *, latency_s: float, ok: bool) -> None:
        """Nothing to give back: tokens refill with time."""


class PriorityShedder:
    """Sheds load, lowest priority first; refusals are 503.

    By fraction (`try_acquire(priority)`, `set_fraction`): traffic shares per priority
    are counted over the last two epochs; with shed fraction f, whole priority classes
    from the lowest up are shed while their cumulative share fits in f, and the next
    class is shed in part. The part is exact and deterministic (an error-diffusion
    accumulator), not a coin flip.

    By class (`classes=` the budget's class list; `admit(name)`, `follow(decision)`):
    the shedder follows the decisions serve emits (a controller's `ClassDecision` or the
    JSON body its webhook posts) and refuses every request of the classes they shed (the
    highest `priority` number first, as `control.class_shedding.ShedOrder` orders them),
    admitting the others. A name outside the list folds into `other`, counted and
    admitted: its requests are the service-wide objectives', which never shed a class.
    """

    def __init__(
        self,
        fraction: float = 0.0,
        *,
        classes: object = None,
        epoch_s: float = 5.0,
        retry_after_s: float = 1.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.epoch_s = _positive("epoch_s", epoch_s)
        self.retry_after_s = _positive("retry_after_s", retry_after_s, allow_zero=True)
        self.fraction = self._check(fraction)
        self._cur: dict[int, int] = {}
        self._prev: dict[int, int] = {}
        self._epoch_at = clock()
        self._acc: dict[int, float] = {}
        self.shed_total = 0
        self.seen_total = 0
        self.classes: dict[str, int] = _class_priorities(classes)
        """{class name: budget priority} ({} when no classes are listed: by fraction)."""
        self._order = _shed_order(self.classes)
        self.shedding: tuple[str, ...] = ()
        """The classes refused now, in shedding order."""
        self.class_seen: dict[str, int] = {}
        """Requests per class asked through `admit` (names outside the list as `other`)."""
        self.class_shed: dict[str, int] = {}
        self.other_total = 0

    @staticmethod
    def _check(fraction: float) -> float:
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, int | float)
            or not 0 <= fraction <= 1
        ):
            raise PolicyError(f"shed fraction must be in [0, 1], got {fraction!r}")
        return float(fraction)

    def set_fraction(self, fraction: float) -> None:
        """Shed this share of all traffic from now on (0 stops shedding)."""
        f = self._check(fraction)
        with self._lock:
            self.fraction = f

    def _shed_probability(self, priority: int) -> float:
        counts = dict(self._prev)
        for p, n in self._cur.items():
            counts[p] = counts.get(p, 0) + n
        total = sum(counts.values())
        if total == 0:
            return self.fraction
        left = self.fraction
        for p in sorted(counts):
            share = counts[p] / total
            if p == priority:
                return 1.0 if share <= left else max(0.0, left / share)
            left -= share
            if left <= 0:
                return 0.0
        return 0.0

    def try_acquire(self, priority: int = 0) -> Admission:
        """Admit, or shed with 503 when this priority's turn to shed has come."""
        try:
            with self._lock:
                now = self._clock()
                if now - self._epoch_at >= self.epoch_s:
                    self._prev = self._cur if now - self._epoch_at < 2 * self.epoch_s else {}
                    self._cur, self._epoch_at = {}, now
                self._cur[priority] = self._cur.get(priority, 0) + 1
                self.seen_total += 1
                if self.fraction <= 0.0:
                    return ADMIT
                acc = self._acc.get(priority, 0.0) + self._shed_probability(priority)
                shed = acc >= 1.0 - 1e-12
                self._acc[priority] = acc - 1.0 if shed else acc
                if not shed:
                    return ADMIT
                self.shed_total += 1
            return Admission(
                False,
                503,
                self.retry_after_s,
                f"load shed (fraction {self.fraction:.2f}, priority {priority})",
            )
        except Exception:
            log.exception("load shedder failed; admitting")
            return ADMIT

    def admit(self, klass: str | None) -> Admission:
        """Admit a request of class `klass`, or refuse it with 503 while its class is shed.

        None (a request without a class) is admitted; a name outside the list counts as
        `other` and is admitted. Without a class list, the fraction decides (priority 0).
        Never raises: a fault or a name that is not a string is logged and admitted."""
        try:
            if self._order is None:
                return self.try_acquire(0)
            if klass is not None and not isinstance(klass, str):
                log.warning("load shedder: class %r is not a string; admitting", klass)
                return ADMIT
            with self._lock:
                self.seen_total += 1
                if klass is None:
                    return ADMIT
                name = klass if klass in self.classes else OTHER
                self.class_seen[name] = self.class_seen.get(name, 0) + 1
                if name == OTHER:
                    self.other_total += 1
                if name not in self.shedding:
                    return ADMIT
                self.shed_total += 1
                self.class_shed[name] = self.class_shed.get(name, 0) + 1
            return Admission(False, 503, self.retry_after_s, f"load shed (class {name})")
        except Exception:
            log.exception("load shedder failed; admitting")
            return ADMIT

    def follow(self, decision: object) -> None:
        """Take a shed_load / stop_shedding decision as serve emits it: a `ClassDecision`
        (its `shedding`: every class shed after it) or its webhook's JSON body. A decision
        without `shedding` (a plain controller's) steps the shed order as serve would.
        Other actions and dry runs change nothing. Never raises: a malformed decision is
        logged and the shedding stays as it was."""
        try:
            if self._order is None:
                log.warning("load shedder lists no classes; decision %r not followed", decision)
                return
            action, shedding, trigger = _shed_fields(decision)
            if action not in ("shed_load", "stop_shedding"):
                return
            with self._lock:
                if shedding is None:
                    self._order.step(action, trigger)
                    names = set(self._order.shed)
                else:
                    names = set(shedding) & self.classes.keys()
                    if ignored := set(shedding) - names:
                        log.warning("load shedder: not listed, not shed: %s", sorted(ignored))
                self.shedding = tuple(n for n in self._order.order if n in names)
        except Exception:
            log.exception("load shedder: decision %r not followed", decision)

    def release(self, admission: Admission, *, latency_s: float, ok: bool) -> None:
        """Nothing to give back."""


def _class_priorities(classes: object) -> dict[str, int]:
    """{name: priority} from a Budget, its `classes:` block or a mapping (a one-line
    PolicyError on anything else); {} when there are no classes (shedding by fraction)."""
    if classes is None:
        return {}
    if hasattr(classes, "by") and hasattr(classes, "specs"):
        return {n: s.priority for n, s in classes.specs().items()}
    if hasattr(classes, "slo") and hasattr(classes, "classes"):  # a Budget
        return _class_priorities(classes.classes)
    if not isinstance(classes, Mapping):
        raise PolicyError(
            "classes must be a budget, its classes: block or {name: priority}, "
            f"got {type(classes).__name__}",
            param="classes",
        )
    out: dict[str, int] = {}
    for name, prio in classes.items():
        if not isinstance(name, str) or not CLASS_NAME.match(name) or name == OTHER:
            raise PolicyError(
                f"class name {name!r}: use 1 to 63 letters, digits, _ . - ({OTHER!r} is "
                "reserved for names outside the list)",
                param="classes",
            )
        if isinstance(prio, bool) or not isinstance(prio, int) or not 0 <= prio <= 1000:
            raise PolicyError(
                f"class {name}: priority must be a whole number 0 to 1000, got {prio!r}",
                param="classes",
            )
        out[name] = prio
    return out


def _shed_order(classes: Mapping[str, int]) -> ShedOrder | None:
    """The shed order of the listed classes (serve's and replay's), None without classes."""
    if not classes:
        return None
    return ShedOrder(sorted(classes, key=lambda n: (-classes[n], n)))


def _shed_fields(decision: object) -> tuple[str, list[str] | None, str]:
    """(action, shedding or None, trigger) of a decision or its JSON body; a dry run reads
    as no action (serve never executes one)."""
    get: Callable[[str], Any]
    if isinstance(decision, Mapping):
        get = decision.get
    else:
        get = lambda key: getattr(decision, key, None)  # noqa: E731
    action, shedding, trigger = get("action"), get("shedding"), get("trigger")
    if get("dry_run") is True or not isinstance(action, str):
        return "", None, ""
    if shedding is not None and (
        not isinstance(shedding, list | tuple) or not all(isinstance(n, str) for n in shedding)
    ):
        raise ValueError(f"shedding must be a list of class names, got {shedding!r}")
    trig = trigger if isinstance(trigger, str) else "service"
    return action, None if shedding is None else list(shedding), trig


@dataclass
class AIMD:
    """Additive increase while saturated and healthy; multiplicative decrease on a slow
    (> `timeout_s`) or failed request (as Netflix concurrency-limits' AIMDLimit)."""

    timeout_s: float = 1.0
    backoff: float = 0.9

    def update(self, limit: float, latency_s: float, inflight: int, ok: bool) -> float:
        """The next limit."""
        if not ok or latency_s > self.timeout_s:
            return limit * self.backoff
        if inflight * 2 >= limit:
            return limit + 1.0
        return limit


@dataclass
class Gradient:
    """Gradient limit (Netflix Gradient2 / Envoy adaptive concurrency): compares a long-run
    latency average with the recent one; when recent latency rises the limit shrinks
    proportionally, and it grows by a sqrt(limit) queue allowance while latency holds."""

    tolerance: float = 1.5
    smoothing: float = 0.2
    short_n: int = 10
    long_n: int = 600
    _short: float = 0.0
    _long: float = 0.0
    _n: int = 0

    def update(self, limit: float, latency_s: float, inflight: int, ok: bool) -> float:
        """The next limit."""
        self._n += 1
        if self._n == 1:
            self._short = self._long = latency_s
        a_s, a_l = 2.0 / (self.short_n + 1), 2.0 / (self.long_n + 1)
        self._short += a_s * (latency_s - self._short)
        self._long += a_l * (latency_s - self._long)
        if self._long / max(self._short, 1e-12) > 2.0:
            self._long *= 0.95  # recover faster after a load drop
        if inflight < limit / 2 and ok:
            return limit  # app-limited: no evidence about the limit
        gradient = max(0.5, min(1.0, self.tolerance * self._long / max(self._short, 1e-12)))
        target = limit * gradient + math.sqrt(limit)
        if not ok:
            target = min(target, limit * 0.9)
        return limit * (1 - self.smoothing) + target * self.smoothing


class ConcurrencyLimit:
    """Adaptive cap on requests in flight; over the cap a request is refused with 503."""

    def __init__(
        self,
        initial: int = 20,
        *,
        min_limit: int = 1,
        max_limit: int = 1000,
        algorithm: AIMD | Gradient | None = None,
        retry_after_s: float = 0.5,
    ) -> None:
        if not 1 <= min_limit <= initial <= max_limit:
            raise PolicyError(
                "need 1 <= min_limit <= initial <= max_limit, "
                f"got {min_limit}, {initial}, {max_limit}"
            )
        self._lock = threading.Lock()
        self.min_limit, self.max_limit = min_limit, max_limit
        self._limit = float(initial)
        self.algorithm = algorithm if algorithm is not None else Gradient()
        self.retry_after_s = _positive("retry_after_s", retry_after_s, allow_zero=True)
        self.inflight = 0
        self.refused_total = 0

    @property
    def limit(self) -> int:
        """The current cap (whole requests)."""
        return int(self._limit)

    def try_acquire(self, priority: int = 0) -> Admission:
        """Admit while fewer than `limit` requests are in flight."""
        try:
            with self._lock:
                if self.inflight < int(self._limit):
                    self.inflight += 1
                    return ADMIT
                self.refused_total += 1
                limit = int(self._limit)
            return Admission(False, 503, self.retry_after_s, f"concurrency limit {limit} reached")
        except Exception:
            log.exception("concurrency limit failed; admitting")
            return ADMIT

    def release(self, admission: Admission, *, latency_s: float, ok: bool) -> None:
        """Give back the slot; a finite latency also updates the limit."""
        if not admission.allowed:
            return
        try:
            with self._lock:
                inflight = self.inflight
                self.inflight = max(0, self.inflight - 1)
                if isinstance(latency_s, int | float) and math.isfinite(latency_s):
                    new = self.algorithm.update(
                        self._limit, max(0.0, latency_s), inflight, bool(ok)
                    )
                    self._limit = min(float(self.max_limit), max(float(self.min_limit), new))
        except Exception:
            log.exception("concurrency limit release failed")


class Chain:
    """Several gates in order; the first refusal wins and earlier gates are released
    as cancelled. Put gates that hold a resource (ConcurrencyLimit) last."""

    def __init__(self, gates: Sequence[Gate]) -> None:
        self.gates = tuple(gates)

    def try_acquire(self, priority: int = 0) -> Admission:
        """Admit only when every gate admits."""
        for i, gate in enumerate(self.gates):
            adm = gate.try_acquire(priority)
            if not adm.allowed:
                for earlier in self.gates[:i]:
                    earlier.release(ADMIT, latency_s=math.nan, ok=True)
                return adm
        return ADMIT

    def release(self, admission: Admission, *, latency_s: float, ok: bool) -> None:
        """Release every gate of an admitted request."""
        if admission.allowed:
            for gate in self.gates:
                gate.release(admission, latency_s=latency_s, ok=ok)
