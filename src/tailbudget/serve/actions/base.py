"""The action protocol and the dispatcher that journals every decision before acting."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tailbudget.serve.journal import DecisionLike, Journal

__all__ = ["Action", "Dispatcher", "Outcome"]

log = logging.getLogger("tailbudget.control.actions")


@runtime_checkable
class Action(Protocol):
    """Something the controller can do about a decision (POST a webhook, trim logs, ...)."""

    name: str

    def handles(self, action: str) -> bool:
        """Whether this executor acts on decisions of kind `action` (e.g. "rollback")."""

    def execute(self, decision: DecisionLike, key: str) -> str:
        """Carry out the decision; return a short detail, raise on failure."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one executor did with one decision."""

    executor: str
    ok: bool
    detail: str


class Dispatcher:
    """Journals each decision durably, then hands it to every executor that handles it.

    Dry-run decisions are journaled and not executed. An executor that fails
    is journaled as a failed outcome and logged; it never stops the others
    and never raises into the evaluation loop.
    """

    def __init__(self, journal: Journal, actions: Sequence[Action] = ()) -> None:
        self.journal = journal
        self.actions: list[Action] = list(actions)

    def dispatch(self, decision: DecisionLike) -> list[Outcome]:
        """Journal, then execute (unless dry run); returns one outcome per executor."""
        return self.execute(decision, self.record(decision))

    def record(self, decision: DecisionLike) -> str:
        """Journal the decision durably; returns its idempotency key."""
        return str(self.journal.append_decision(decision)["id"])

    def execute(
        self, decision: DecisionLike, key: str, *, note_dry_run: bool = True
    ) -> list[Outcome]:
        """Run the executors for a decision already journaled under `key`."""
        if decision.dry_run:
            if not note_dry_run:
                return []
            self.journal.append_outcome(
                key, decision.action, ok=True, detail="dry run: journaled, not executed"
            )
            return [Outcome("dry_run", True, "not executed")]
        outcomes: list[Outcome] = []
        for executor in self.actions:
            if not executor.handles(decision.action):
                continue
            try:
                detail = executor.execute(decision, key)
                outcome = Outcome(executor.name, True, detail)
            except Exception as exc:  # an action must never take the controller down
                log.error("action %s failed for %s: %s", executor.name, decision.action, exc)
                outcome = Outcome(executor.name, False, f"{type(exc).__name__}: {exc}")
            outcomes.append(outcome)
            self.journal.append_outcome(
                key, decision.action, ok=outcome.ok, detail=f"{outcome.executor}: {outcome.detail}"
            )
        return outcomes
