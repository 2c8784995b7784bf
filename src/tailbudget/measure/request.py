"""The request context and its stage timers (sync and async context managers).

Hot path: a stage costs one small slotted object, two `perf_counter_ns`
calls, a context-variable set/reset (for `parent/child` names that stay right
under threads and asyncio tasks) and a list append. Sums, names and formatting
happen in the writer thread. Nothing here raises into the request: misuse is
logged and dropped.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Callable, Iterable
from contextvars import ContextVar, Token
from time import perf_counter_ns
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from tailbudget.measure.record import Record
from tailbudget.measure.stream import StreamTimer

if TYPE_CHECKING:
    from tailbudget.measure.recorder import Recorder

log = logging.getLogger("tailbudget.measure")
T = TypeVar("T")

_STAGE: ContextVar[StageTimer | None] = ContextVar("tailbudget_stage", default=None)
_REQUEST: ContextVar[Request | None] = ContextVar("tailbudget_request", default=None)


def current_request() -> Request | None:
    """The request being recorded in this thread or task, if any."""
    return _REQUEST.get()


class StageTimer:
    """Times one stage occurrence; `with` and `async with` both work.

    For an optional stage that cannot be afforded, `run` is False (and the
    object is falsy): Python cannot skip a `with` body, so write
    `with req.stage("rerank", optional=True) as s:` then `if s: ...`.
    """

    __slots__ = ("_done", "_req", "_token", "error", "name", "parent", "run", "t0", "t1")

    def __init__(self, done: list[StageTimer], name: str, req: Request | None) -> None:
        self._done = done
        self.name = name
        self._req = req  # only set for optional stages (to record degradation)
        self.parent: StageTimer | None = None
        self.t0: int | None = None
        self.t1: int | None = None
        self.error: str | None = None
        self.run = True

    def __bool__(self) -> bool:
        return self.run

    def __enter__(self) -> StageTimer:
        try:
            if self._req is not None:
                if not self._req._afford(self.name):
                    self.run = False
                    return self
                self._req = None  # no request -> timer -> request cycle for the GC
            parent = _STAGE.get()
            if parent is not None and parent._done is self._done:
                self.parent = parent
                self.name = f"{parent.name}/{self.name}"
            self._token = _STAGE.set(self)
        except Exception:  # never break the request
            log.exception("tailbudget: stage %r could not start", self.name)
        self.t0 = perf_counter_ns()
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.t1 = perf_counter_ns()
        if not self.run:
            return
        try:
            _STAGE.reset(self._token)
            if et is not None:
                self.error = et.__name__
            self._done.append(self)
        except Exception:  # e.g. exited in another context than entered
            log.warning("tailbudget: stage %r misused (exit without enter?); dropped", self.name)

    async def __aenter__(self) -> StageTimer:
        return self.__enter__()

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(et, ev, tb)


class Request:
    """One request being recorded: `with rec.request(route="chat", seq_len=812) as req:`."""

    __slots__ = (
        "_deadline_ns",
        "_done",
        "_error",
        "_rec",
        "_streams",
        "_token",
        "degraded",
        "deadline_ms",
        "fields",
        "request_id",
        "t0",
    )

    def __init__(
        self,
        rec: Recorder,
        request_id: int | str,
        fields: dict[str, Any],
        deadline_ms: float | None,
    ) -> None:
        self._rec = rec
        self.request_id = request_id
        self.fields = fields
        """Covariates and cohorts; add more with `req.set(key=value)`."""
        self.deadline_ms = deadline_ms
        self._done: list[StageTimer] = []
        self._streams: list[StreamTimer] | None = None
        self.degraded: list[str] | None = None
        self._deadline_ns: int | None = None
        self._error: str | None = None
        self.t0 = 0

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
        self._rec._put(
            Record(
                self.request_id,
                self.t0,
                t1,
                self._done,
                self._error if et is None else et.__name__,
                self.fields,
                self.degraded,
                self._streams,
            )
        )

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
        return StageTimer(self._done, name, self if optional else None)

    def fail(self, reason: str) -> None:
        """Mark the request as failed without an exception (e.g. an HTTP 5xx answer)."""
        self._error = str(reason)

    def set(self, **fields: Any) -> None:
        """Add covariates known only later (output tokens, cache hit...)."""
        self.fields.update(fields)

    @property
    def id(self) -> str:
        """The request id as written to the log."""
        rid = self.request_id
        return f"{self._rec.id_prefix}{rid:08x}" if isinstance(rid, int) else rid

    # deadlines ---------------------------------------------------------------
    @property
    def remaining_ms(self) -> float | None:
        """Milliseconds left before the deadline (negative when past), None without one."""
        if self._deadline_ns is None:
            return None
        return (self._deadline_ns - perf_counter_ns()) / 1e6

    def can_afford(self, stage: str) -> bool:
        """True when the time left covers the stage's p95 budget (or there is no deadline)."""
        remaining = self.remaining_ms
        if remaining is None:
            return True
        need = self._rec._stage_need_ms(stage)
        return need is None or remaining >= need

    def _afford(self, name: str) -> bool:
        parent = _STAGE.get()
        full = f"{parent.name}/{name}" if parent is not None and parent._done is self._done else name
        if self.can_afford(name):
            return True
        if self.degraded is None:
            self.degraded = []
        self.degraded.append(full)
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
        `attributes` (model=..., system=..., input_tokens=...) go to the span.
        """
        timer: StreamTimer[T] = StreamTimer(source, tokens, attributes, _STAGE.get())
        if self._streams is None:
            self._streams = []
        self._streams.append(timer)
        return timer
