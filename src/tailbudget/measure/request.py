"""The request context and its stage timers (sync and async context managers).

Hot path: a stage costs one small slotted object, two `perf_counter_ns`
calls, a check of who is running (two C calls: stages of the request's own
thread or task nest through a stack on the request; only stages of other
tasks or threads set a context variable) and one list extend. A finished
request is one flat tuple of atomic values (plus its covariate dict): the
cyclic GC untracks it at its first pass, so records waiting for the writer
cost it nothing.
Slots that are rarely used (error, parent, deadline, streams) are left unset
rather than initialised; readers use `getattr(obj, name, default)`. Sums,
names, ids and formatting happen in the writer thread. Nothing here raises
into the request: misuse is logged and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterable, Callable, Iterable
from contextvars import ContextVar, Token
from time import perf_counter_ns
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from tailbudget.measure.record import Extra
from tailbudget.measure.stream import StreamTimer

if TYPE_CHECKING:
    from tailbudget.measure.recorder import Recorder

log = logging.getLogger("tailbudget.measure")

DEADLINE_HEADER = "x-tailbudget-deadline-ms"
"""Remaining budget of the request, in milliseconds (propagated by `headers()`)."""
REQUEST_ID_HEADER = "x-request-id"
T = TypeVar("T")

_STAGE: ContextVar[StageTimer | None] = ContextVar("tailbudget_stage", default=None)
_REQUEST: ContextVar[Request | None] = ContextVar("tailbudget_request", default=None)
_set_stage = _STAGE.set
_running_loop = asyncio._get_running_loop  # C: None outside a loop, never raises
_current_task = asyncio.current_task
_thread_id = threading.get_ident
_reset_stage = _STAGE.reset
_MISSING = Token.MISSING
_new = object.__new__


def current_request() -> Request | None:
    """The request being recorded in this thread or task, if any."""
    return _REQUEST.get()


def _owner() -> object:
    """Who runs this code: the asyncio task, or the thread when no loop runs here."""
    loop = _running_loop()
    return _thread_id() if loop is None else _current_task(loop)


class StageTimer:
    """Times one stage occurrence; `with` and `async with` both work.

    On exit it extends its request's flat stage list with `name, t0_ns, t1_ns`
    (an escaping exception's type goes to the request's rarely used extras)
    and is then garbage: finished requests waiting for the writer hold no
    per-stage objects.
    For an optional stage that cannot be afforded, the timer is falsy and
    records nothing but the degradation. Python cannot skip a `with` body, so
    write `with req.stage("rerank", optional=True) as s:` then `if s: ...`.

    Nesting: stages entered by the request's own thread or task nest through
    a stack kept on the request (two C calls to check who is running, no
    context-variable churn). A stage entered by another task or thread (a
    `gather` branch, a thread-pool call) nests under what its request's owner
    is in at that moment, and through a context variable below that, so
    concurrent branches never nest in each other.
    """

    __slots__ = ("_req", "_token", "name", "skipped", "t0", "up")

    _req: Request
    _token: Token[StageTimer | None]
    name: str
    t0: int
    up: StageTimer | None
    skipped: bool

    def __bool__(self) -> bool:
        return not getattr(self, "skipped", False)

    def __enter__(self) -> StageTimer:
        try:
            req = self._req
            loop = _running_loop()
            if (_thread_id() if loop is None else _current_task(loop)) == req._owner:
                self.up = up = req._top
                req._top = self
            else:  # another task or thread of this request: nest per context
                self._token = token = _set_stage(self)
                up = token.old_value
                if up is _MISSING or up is None or up._req is not req:
                    up = req._top
                self.up = up
            if up is not None:
                self.name = f"{up.name}/{self.name}"
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
            req = self._req
            if req._top is self:
                req._top = self.up
            else:
                self._pop()
            req._done += (self.name, self.t0, t1)
            if et is not None:
                req._extras().stage_errors[len(req._done) // 3 - 1] = et.__name__
        except Exception:  # exit without enter, twice, or in another context
            if not getattr(self, "skipped", False):
                log.warning("tailbudget: stage %r misused; dropped", getattr(self, "name", None))

    def _pop(self) -> None:
        token = getattr(self, "_token", None)
        if token is not None:
            _reset_stage(token)
        elif not getattr(self, "skipped", False):
            # The owner exited stages out of order (manual __enter__/__exit__ calls).
            log.warning("tailbudget: stage %r exited before a stage inside it", self.name)

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
            if not self._req._afford(self.name):
                self.skipped = True
                self.t0 = perf_counter_ns()
                return self
        except Exception:
            log.exception("tailbudget: optional stage %r could not decide", self.name)
        return super().__enter__()

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not getattr(self, "skipped", False):
            super().__exit__(et, ev, tb)


class Request:
    """One request being recorded: `with rec.request(route="chat", seq_len=812) as req:`.

    Built by `Recorder.request` (which fills the slots directly: no __init__ frame).
    """

    __slots__ = (
        "_deadline_ns",
        "_done",
        "_extra",
        "_owner",
        "_rec",
        "_token",
        "_top",
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
    _done: list[Any]
    _extra: Extra | None
    _deadline_ns: int
    _owner: object
    _top: StageTimer | None
    t0: int

    def __enter__(self) -> Request:
        self._token = _REQUEST.set(self)
        loop = _running_loop()  # _owner(), inlined: this runs on every request
        self._owner = _thread_id() if loop is None else _current_task(loop)
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
        q = rec._queue
        n = len(q)
        # The pump's put, inlined: a bounded, non-blocking append (atomic under the GIL).
        if n < rec._capacity:  # 0 once the recorder is closed
            # A plain tuple in `Record` field order (a NamedTuple instance stays tracked).
            q.append(
                (
                    self.request_id,
                    self.t0,
                    t1,
                    tuple(self._done),
                    None if et is None else et.__name__,
                    self.fields,
                    self._extra,
                )
            )
            if n == rec._wake_at:
                rec._wake()
        else:
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
        t = _new(OptionalStageTimer) if optional else _new(StageTimer)
        t._req = self
        t.name = name
        return t

    def _current_stage(self) -> StageTimer | None:
        """The innermost open stage of this request where the caller runs."""
        if _owner() == getattr(self, "_owner", None):
            return self._top
        up = _STAGE.get()
        return up if up is not None and up._req is self else self._top

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
        return f"{self._rec.id_prefix}{rid}" if isinstance(rid, int) else rid

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
        parent = self._current_stage()
        self._extras().degraded.append(name if parent is None else f"{parent.name}/{name}")
        return False

    def headers(self) -> dict[str, str]:
        """Headers that carry this request's deadline (and id) to a downstream call."""
        out = {REQUEST_ID_HEADER: self.id}
        remaining = self.remaining_ms
        if remaining is not None:
            out[DEADLINE_HEADER] = f"{max(remaining, 0.0):.0f}"
        return out

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
        parent = self._current_stage()
        parent_t0 = None if parent is None else parent.t0
        timer: StreamTimer[T] = StreamTimer(source, tokens, attributes, parent_t0)
        self._extras().streams.append(timer)
        return timer
