"""Slow and idle clients cannot starve the server: a header deadline and a connection cap.

uvicorn (h11) waits forever for a request's headers on a new connection, so a
client that opens sockets and sends half a request holds them until it goes
away; past the process's file-descriptor limit the server cannot accept
anyone else. `guarded_protocol` gives uvicorn a protocol class that

- closes a connection whose first request's headers did not arrive within
  `header_timeout_s` (later requests on a kept-alive connection already have
  uvicorn's keep-alive timeout), and
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

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "BACKLOG",
    "HEADER_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "connection_cap",
    "guarded_protocol",
    "open_files_limit",
]

HEADER_TIMEOUT_S = 10.0
"""Longest a new connection may take to send its first request's headers."""

MAX_CONNECTIONS = 1000
"""Most connections open at once (lowered to fit the file-descriptor limit)."""

BACKLOG = 128
"""The listen backlog, which is also how many connections asyncio accepts in one go
(before any of them can be turned away), so the cap leaves room for one such burst."""

_SPARE_FDS = 64  # the state dir's files, the journal, the log, an action's pipes

log = logging.getLogger(__name__)


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
    max_connections: int, header_timeout_s: float = HEADER_TIMEOUT_S
) -> type[H11Protocol]:
    """An h11 protocol class for uvicorn's `http=` with the deadline and the cap."""

    class _Guarded(H11Protocol):
        _opened_at = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._opened_at = self.loop.time()
            # The keep-alive timer closes the connection unless a whole request arrives
            # first (uvicorn cancels it on each complete request's headers).
            self.timeout_keep_alive_task = self.loop.call_later(
                header_timeout_s, self.timeout_keep_alive_handler
            )
            if len(self.connections) > max_connections:
                self._evict()

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
