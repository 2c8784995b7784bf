"""A time limit on the engine's work for SQL the user wrote (`--query`).

A query is the user's own program: a recursive CTE without a stop condition runs
until killed. DuckDB has no statement timeout setting, but its connection can be
interrupted from another thread; a timer does that when the limit passes, and the
error says so instead of the engine's "Interrupted!". Engines without an interrupt
(Spark, a warehouse by URL) keep their own timeouts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tailbudget.errors import TailbudgetError, said

__all__ = ["DEFAULT_QUERY_TIMEOUT_S", "query_deadline"]

DEFAULT_QUERY_TIMEOUT_S = 600.0
"""Ten minutes: an audit of tens of millions of rows on DuckDB takes well under that."""


@contextmanager
def query_deadline(
    backend: Any, seconds: float, *, limit_name: str = "query_timeout"
) -> Iterator[None]:
    """Interrupt the engine's work inside the block once `seconds` have passed; the
    interrupted work is one TailbudgetError naming the limit (as `limit_name`)."""
    interrupt = getattr(getattr(backend, "con", None), "interrupt", None)
    if not callable(interrupt):
        yield
        return
    fired = threading.Event()

    def fire() -> None:
        fired.set()
        interrupt()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except Exception as exc:
        if not fired.is_set():
            raise
        raise TailbudgetError(
            f"query: still running after its time limit of {seconds:g} s and was stopped; "
            "make it finish (a recursive CTE needs a stop condition, a large scan a filter) "
            f"or raise {said(limit_name)}",
            param="query",
            mentions=(limit_name,),
        ) from exc
    finally:
        timer.cancel()
