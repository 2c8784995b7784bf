"""The one exception root of tailbudget and its few subclasses.

Messages name the bad value and say what to write instead, in words that fit
any caller: a parameter is named as the Python API spells it (`total`, `slo`),
never as a command-line flag. `param` carries that name so a front end can
point at its own spelling: the CLI prints `--total` in its one `error:` line
and exits 2; a Python caller reads `exc.param == "total"`. A message that names more
arguments writes each with `said` (`duration='10000h'`, or the bare `max_events`) and
lists them in `mentions`, which the CLI spells as flags the same way
(`--duration 10000h`, `--max-events`): the one way an argument reaches a message.
"""

from __future__ import annotations

__all__ = ["BudgetError", "LogError", "PolicyError", "TailbudgetError", "said"]


def said(name: str, value: object = None) -> str:
    """An argument named in a message as Python spells it: `duration='10000h'` with a
    value, the bare `max_events` without (list it in the error's `mentions`)."""
    return name if value is None else f"{name}={value!r}"


class TailbudgetError(Exception):
    """Root of every error tailbudget raises on purpose (bad input, bad config)."""

    def __init__(
        self, message: str, *, param: str | None = None, mentions: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.param = param
        """The argument the error is about, as the Python API names it (None: no one)."""
        self.mentions = mentions
        """Further arguments the message names, each written by `said`."""

    def __reduce__(self) -> tuple[object, ...]:
        # Exceptions pickle by their args alone; keep the keywords across processes.
        return (_rebuild, (type(self), str(self), self.param, self.mentions))


def _rebuild(
    cls: type[TailbudgetError], message: str, param: str | None, mentions: tuple[str, ...] = ()
) -> TailbudgetError:
    return cls(message, param=param, mentions=mentions)


class BudgetError(TailbudgetError):
    """The budget file (or a budget given on the command line) is invalid."""


class LogError(TailbudgetError):
    """A latency log cannot be read or has no usable latency column."""


class PolicyError(TailbudgetError):
    """A control policy or its inputs are invalid."""
