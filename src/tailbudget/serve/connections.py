"""Slow and idle clients cannot starve the server: a header deadline and a connection cap.

uvicorn waits forever for a request's headers on a new connection (its httptools
protocol even stops the keep-alive timer on any byte), so a client that opens
sockets and sends half a request holds them until it goes away; past the
process's file-descriptor limit the server cannot accept anyone else.
`guarded_protocol` gives uvicorn a protocol class (httptools: the HTTP parsing is
llhttp in C, a quarter of the server's time under h11 at a million spans) that

- closes a connection whose request headers did not all arrive within
  `header_timeout_s` of connecting or of the previous response,
- answers 400 and closes when a request's headers pass `max_header_bytes` (what
  h11's incomplete-event limit did; llhttp itself sets none), and
- keeps at most `max_connections` open: a new connection past the cap closes
  the oldest one that is not in the middle of a request (idle or still sending
  headers), so a well-behaved client is served while slow ones wait.

`open_files_limit` raises the soft file-descriptor limit to the hard one, and
the cap stays below it with room for the state files and the log.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = [
    "BACKLOG",
    "HEADER_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "MAX_HEADER_BYTES",
    "connection_cap",
    "guarded_protocol",
    "open_files_limit",
]

HEADER_TIMEOUT_S = 10.0
"""Longest a new connection may take to send its first request's headers."""

MAX_HEADER_BYTES = 16 * 1024
"""Most bytes of one request's line and headers."""

MAX_CONNECTIONS = 1000
"""Most connections open at once (lowered to fit the file-descriptor limit)."""

BACKLOG = 128
"""The listen backlog, which is also how many connections asyncio accepts in one go
(before any of them can be turned away), so the cap leaves room for one such burst."""

_SPARE_FDS = 64  # the state dir's files, the journal, the log, an action's pipes

# Named as before serve/ left control/: a logging config may filter on it.
log = logging.getLogger("tailbudget.control.service.connections")


def open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (when allowed); the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 65536 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # keep the soft limit; the cap below adapts to it
    return soft


def connection_cap(requested: int = MAX_CONNECTIONS) -> int:
    """`requested`, lowered to leave spare descriptors and one accept burst under the limit."""
    soft = open_files_limit()
    return max(1, min(requested, soft - _SPARE_FDS - BACKLOG))


def guarded_protocol(
    max_connections: int,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    max_header_bytes: int = MAX_HEADER_BYTES,
) -> type[HttpToolsProtocol]:
    """An httptools protocol class for uvicorn's `http=` with the deadline and the caps."""

    class _Guarded(HttpToolsProtocol):
        _opened_at = 0.0
        _awaiting = True
        """Between requests: the next request's headers are not all in yet."""
        _header_bytes = 0
        _headers_done = 0
        """Requests whose headers were complete (a chunk may hold a whole request)."""
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._opened_at = self.loop.time()
            self._arm()
            if len(self.connections) > max_connections:
                self._evict()

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(header_timeout_s, self._late)

        def _late(self) -> None:
            self._deadline = None
            idle = self.cycle is None or self.cycle.response_complete
            if self._awaiting and idle and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            awaiting, done = self._awaiting, self._headers_done
            super().data_received(data)
            # Fed first: a chunk that completes the headers may carry the body too, and
            # the bytes fed while headers were awaited that left them still incomplete
            # are all header bytes.
            if awaiting and self._awaiting and done == self._headers_done:
                self._header_bytes += len(data)
                if self._header_bytes > max_header_bytes and not self.transport.is_closing():
                    self.send_400_response("Request headers too large.")

        def on_headers_complete(self) -> None:
            self._awaiting = False
            self._headers_done += 1
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._awaiting, self._header_bytes = True, 0

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

        def _evict(self) -> None:
            # Connections being closed still count until asyncio drops them (a few loop
            # turns later), so one new connection evicts one live idle connection.
            idle = [c for c in self.connections if c is not self and _evictable(c)]
            if idle:
                min(idle, key=lambda c: getattr(c, "_opened_at", 0.0)).transport.close()

    return _Guarded


def _evictable(conn: Any) -> bool:
    """Open, and idle or still sending its headers (never one with a request in flight)."""
    transport = getattr(conn, "transport", None)
    if transport is None or transport.is_closing():
        return False
    cycle = getattr(conn, "cycle", None)
    return cycle is None or bool(cycle.response_complete)
