"""A gate never passes on latencies that look like seconds (issue 36).

A log whose latency column names ms (`total_ms`) is read without a question, but a log in
seconds has carried that name: read as ms it is a 1 ms service, every objective passes
and every gate waves it through. So a gate (`--fail-on-*`) asks for the unit to be stated
explicitly (`--unit`, or `log: {unit: ...}` in the budget) when the figures look like
seconds, and exits 2 naming `--unit`; without a gate it is a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tailbudget.errors import TailbudgetError

__all__ = ["unit_for_gate"]


def _stated_in(budget: str | Path | None) -> bool:
    if budget is None:
        return False
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget.budget.load import load_budget

    return "unit" in load_budget(budget).log.model_fields_set


def unit_for_gate(
    flag: str, logs: Sequence[Any], unit: str | None, budget: str | Path | None
) -> None:
    """Refuse (exit 2, naming --unit) to run the gate `flag` on `logs` (paths or data) that
    look like seconds while the unit is not stated explicitly; no read when it is."""
    if unit is not None or _stated_in(budget):
        return
    from tailbudget.budget.load import load_budget
    from tailbudget.logs import ReadOptions, read_log
    from tailbudget.logs.units import seconds_hint

    read = ReadOptions.from_budget(load_budget(budget)) if budget is not None else ReadOptions()
    for source in logs:
        try:
            log = read_log(source, read)
        except TailbudgetError:
            return  # the command itself says what is wrong with the log
        head = seconds_hint(log)
        if head is not None:
            raise TailbudgetError(
                f"{head}, and {flag} does not pass on a guessed unit: state it with --unit s "
                "if they are seconds, --unit ms if they really are milliseconds (or log: "
                "{unit: ...} in the budget)",
                param="unit",
            )
