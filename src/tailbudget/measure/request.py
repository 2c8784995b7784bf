"""The request context and its stage timers (sync and async context managers).

Hot path: a stage costs one small slotted object, two `perf_counter_ns`
calls, a context-variable set/reset (so `parent/child` names stay right under
threads and concurrent asyncio tasks; the set's token names the enclosing
stage, so no separate get) and a list append. Slots that are
rarely used (error, parent, deadline, streams) are left unset rather than
initialised; readers use `getattr(obj, name, default)`. Sums, names, ids and
formatting happen in the writer thread. Nothing here raises into the
request: misuse is logged and dropped.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Callable, Iterable
from contextvars import ContextVar, Token
from time import perf_counter_ns
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from tailbudget.measure.record import Extra, Record, Stage
from tailbudget.measure.stream import StreamTimer

if TYPE_CHECKING:
    from tailbudget.measure.recorder import Recorder

log = logging.getLogger("tailbudget.measure")
T = TypeVar("T")

_STAGE: ContextVar[StageTimer | None] = ContextVar("tailbudget_stage", default=None)
_REQUEST: ContextVar[Request | None] = ContextVar("tailbudget_request", default=None)
_set_stage = _STAGE.set
_reset_stage = _STAGE.reset
_MISSING = Token.MISSING
_new = object.__new__
_record = tuple.__new__


def current_request() -> Request | None:
    """The request being recorded in this thread or task, if any."""
    return _REQUEST.get()


class StageTimer:
    """Times one stage occurrence; `with` and `async with` both work.

    On exit it appends one tuple `(name, t0_ns, t1_ns, parent_t0_ns, error)`
    to its request and is then garbage: finished requests waiting for the
    writer hold no per-stage objects the cyclic GC would have to scan.
    For an optional stage that cannot be afforded, the timer is falsy and
    records nothing but the degradation. Python cannot skip a `with` body, so
    write `with req.stage("rerank", optional=True) as s:` then `if s: ...`.
    """

    __slots__ = ("_done", "_req", "_token", "name", "p", "skipped", "t0")

    _done: list[Stage]
    _req: Request
    name: str
    t0: int
    p: int | None
    skipped: bool

    def __bool__(self) -> bool:
        return not getattr(self, "skipped", False)

    def __enter__(self) -> StageTimer:
        try:
            # One context-variable call: the token carries the enclosing stage.
            self._token = token = _set_stage(self)
            parent = token.old_value
            if parent is not _MISSING and parent is not None and parent._done is self._done:
                self.name = f"{parent.name}/{self.name}"
                self.p = parent.t0
            else:
                self.p = None
        except Exception:  # never break the request
            log.exception("tailbudget: stage %r could not start", getattr(self, "name", None))
        self.t0 = perf_counter_ns()
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        t1 = perf_counter_ns()
        try:
            _reset_stage(self._token)
            self._done.append((self.name, self.t0, t1, self.p, None if et is None else et.__name__))
        except Exception:  # exit without enter, twice, or in another context
            if not getattr(self, "skipped", False):
                log.warning("tailbudget: stage %r misused; dropped", getattr(self, "name", None))

    async def __aenter__(self) -> StageTimer:
        return self.__enter__()

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(et, ev, tb)


class OptionalStageTimer(StageTimer):
    """A stage that is skipped (and recorded as degraded) when the deadline cannot afford it."""

    __slots__ = ()

    def __enter__(self) -> StageTimer:
        try:
            req = self._req
            del self._req  # no request -> timer -> request cycle for the GC
            if not req._afford(self.name):
                self.skipped = True
                self.t0 = perf_counter_ns()
                return self
        except Exception:
            log.exception("tailbudget: optional stage %r could not decide", self.name)
        return super().__enter__()


class Request:
    """One request being recorded: `with rec.request(route="chat", seq_len=812) as req:`.

    Built by `Recorder.request` (which fills the slots directly: no __init__ frame).
    """

    __slots__ = (
        "_deadline_ns",
        "_done",
        "_extra",
        "_rec",
        "_token",
        "deadline_ms",
        "fields",
        "request_id",
        "t0",
    )

    _rec: Recorder
    request_id: int | str
    fields: dict[str, Any]
    """Covariates and cohorts; add more with `req.set(key=value)`."""
    deadline_ms: float | None
    _done: list[Stage]
    _extra: Extra | None
    _deadline_ns: int
    t0: int

    def __enter__(self) -> Request:
        self._token = _REQUEST.set(self)
        self.t0 = t0 = perf_counter_ns()
        if self.deadline_ms is not None:
            self._deadline_ns = t0 + int(self.deadline_ms * 1e6)
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        t1 = perf_counter_ns()
        try:
            _REQUEST.reset(self._token)
        except Exception:
            log.warning("tailbudget: request exited in another context than it entered")
        rec = self._rec
        if not rec._enqueue(
            _record(
                Record,
                (
                    self.request_id,
                    self.t0,
                    t1,
                    # Tuples of atomic values: the GC untracks the whole record at its
                    # first pass, so records waiting for the writer cost it nothing.
                    tuple(self._done),
                    None if et is None else et.__name__,
                    tuple(self.fields.items()),
                    self._extra,
                ),
            )
        ):
            rec._refused()

    async def __aenter__(self) -> Request:
        return self.__enter__()

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(et, ev, tb)

    def stage(self, name: str, optional: bool = False) -> StageTimer:
        """A timer for one stage; `optional=True` skips it (degraded) when unaffordable."""
        if optional:
            o = _new(OptionalStageTimer)
            o._done = self._done
            o.name = name
            o._req = self
            return o
        t = _new(StageTimer)
        t._done = self._done
        t.name = name
        return t

    def _extras(self) -> Extra:
        extra = self._extra
        if extra is None:
            extra = self._extra = Extra()
        return extra

    def fail(self, reason: str) -> None:
        """Mark the request as failed without an exception (e.g. an HTTP 5xx answer)."""
        self._extras().error = str(reason)

    def set(self, **fields: Any) -> None:
        """Add covariates known only later (output tokens, cache hit...)."""
        self.fields.update(fields)

    @property
    def id(self) -> str:
        """The request id as written to the log."""
        rid = self.request_id
        return f"{self._rec.id_prefix}{rid:08x}" if isinstance(rid, int) else rid

    @property
    def degraded(self) -> list[str]:
        """Optional stages skipped because the deadline could not afford them."""
        return list(self._extra.degraded) if self._extra is not None else []

    # deadlines ---------------------------------------------------------------
    @property
    def remaining_ms(self) -> float | None:
        """Milliseconds left before the deadline (negative when past), None without one."""
        deadline: int | None = getattr(self, "_deadline_ns", None)
        if deadline is None:
            return None
        return (deadline - perf_counter_ns()) / 1e6

    def can_afford(self, stage: str) -> bool:
        """True when the time left covers the stage's p95 budget (or there is no deadline)."""
        remaining = self.remaining_ms
        if remaining is None:
            return True
        need = self._rec._stage_need_ms(stage)
        return need is None or remaining >= need

    def _afford(self, name: str) -> bool:
        if self.can_afford(name):
            return True
        parent = _STAGE.get()
        nested = parent is not None and parent._done is self._done
        self._extras().degraded.append(f"{parent.name}/{name}" if nested and parent else name)
        return False

    def headers(self) -> dict[str, str]:
        """Headers that carry this request's deadline (and id) to a downstream call."""
        from tailbudget.measure.deadline import outgoing_headers

        return outgoing_headers(self)

    # streams -----------------------------------------------------------------
    def stream(
        self,
        source: AsyncIterable[T] | Iterable[T],
        *,
        tokens: Callable[[T], int] | None = None,
        **attributes: Any,
    ) -> StreamTimer[T]:
        """Wrap an LLM token stream (sync or async) to record TTFT, decode time and ITL.

        `tokens(chunk)` counts tokens per chunk (1 per item by default);
        `attributes` (model=..., provider=..., input_tokens=...) go to the span.
        """
        parent = _STAGE.get()
        parent_t0 = parent.t0 if parent is not None and parent._done is self._done else None
        timer: StreamTimer[T] = StreamTimer(source, tokens, attributes, parent_t0)
        self._extras().streams.append(timer)
        return timer
