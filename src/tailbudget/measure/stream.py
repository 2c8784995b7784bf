"""LLM stream timing: token arrival stamps, resolved to TTFT/decode/ITL off-path.

The wrapper only stamps `perf_counter_ns` per chunk; quantiles and rates are
computed by `tailbudget.measure.record.stream_stats` in the writer thread.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from time import perf_counter_ns
from typing import Any, Generic, TypeVar

log = logging.getLogger("tailbudget.measure")
T = TypeVar("T")


class StreamTimer(Generic[T]):
    """Iterates a token stream unchanged while stamping each chunk's arrival."""

    __slots__ = (
        "_ait",
        "_count",
        "_it",
        "_source",
        "attributes",
        "counts",
        "parent_t0",
        "start_ns",
        "token_ns",
    )

    def __init__(
        self,
        source: AsyncIterable[T] | Iterable[T],
        count: Callable[[T], int] | None,
        attributes: dict[str, Any],
        parent_t0: int | None,
    ) -> None:
        self._source = source
        self._count = count
        self._ait: AsyncIterator[T] | None = None
        self._it: Iterator[T] | None = None
        self.attributes = attributes
        self.parent_t0 = parent_t0
        """perf_counter_ns start of the enclosing stage, or None."""
        self.start_ns = perf_counter_ns()
        self.token_ns: list[int] = []
        self.counts: list[int] | None = [] if count is not None else None

    def _stamp(self, chunk: T) -> None:
        self.token_ns.append(perf_counter_ns())
        if self._count is not None and self.counts is not None:
            try:
                self.counts.append(int(self._count(chunk)))
            except Exception:
                log.warning("tailbudget: token counter failed on a chunk; counted as 1")
                self.counts.append(1)

    def __aiter__(self) -> StreamTimer[T]:
        return self

    async def __anext__(self) -> T:
        if self._ait is None:
            self._ait = aiter(self._source)  # type: ignore[arg-type]
        chunk = await self._ait.__anext__()
        self._stamp(chunk)
        return chunk

    def __iter__(self) -> StreamTimer[T]:
        return self

    def __next__(self) -> T:
        if self._it is None:
            self._it = iter(self._source)  # type: ignore[arg-type]
        chunk = next(self._it)
        self._stamp(chunk)
        return chunk
