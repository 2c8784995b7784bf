"""The one exception root of tailbudget and its few subclasses.

Messages name the bad value and say what to write instead, in words that fit
any caller: a parameter is named as the Python API spells it (`total`, `slo`),
never as a command-line flag. `param` carries that name so a front end can
point at its own spelling: the CLI prints `--total` in its one `error:` line
and exits 2; a Python caller reads `exc.param == "total"`.
"""

from __future__ import annotations

__all__ = ["BudgetError", "LogError", "PolicyError", "TailbudgetError"]


class TailbudgetError(Exception):
    """Root of every error tailbudget raises on purpose (bad input, bad config)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        """The argument the error is about, as the Python API names it (None: no one)."""

    def __reduce__(self) -> tuple[object, ...]:
        # Exceptions pickle by their args alone; keep the keyword across processes.
        return (_rebuild, (type(self), str(self), self.param))


def _rebuild(cls: type[TailbudgetError], message: str, param: str | None) -> TailbudgetError:
    return cls(message, param=param)


class BudgetError(TailbudgetError):
    """The budget file (or a budget given on the command line) is invalid."""


class LogError(TailbudgetError):
    """A latency log cannot be read or has no usable latency column."""


class PolicyError(TailbudgetError):
    """A control policy or its inputs are invalid."""
