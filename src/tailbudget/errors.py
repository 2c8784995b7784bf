"""The one exception root of tailbudget and its few subclasses.

Messages name the bad value and say what to write instead; the CLI prints
them on one line and exits 2.
"""

from __future__ import annotations

__all__ = ["BudgetError", "LogError", "PolicyError", "TailbudgetError"]


class TailbudgetError(Exception):
    """Root of every error tailbudget raises on purpose (bad input, bad config)."""


class BudgetError(TailbudgetError):
    """The budget file (or a budget given on the command line) is invalid."""


class LogError(TailbudgetError):
    """A latency log cannot be read or has no usable latency column."""


class PolicyError(TailbudgetError):
    """A control policy or its inputs are invalid."""
