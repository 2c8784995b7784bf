"""How the caller spells an argument in the API's composite messages: `duration='10000h'`
from Python, `--duration 10000h` when the command line is the caller (cli/_sim.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["as_flags", "flags"]

_FLAGS: ContextVar[bool] = ContextVar("tailbudget_flags", default=False)


def as_flags() -> bool:
    """True while the command line is the caller."""
    return _FLAGS.get()


@contextmanager
def flags() -> Iterator[None]:
    """Within this block, messages spell arguments as the command line's flags."""
    token = _FLAGS.set(True)
    try:
        yield
    finally:
        _FLAGS.reset(token)
