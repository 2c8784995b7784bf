"""The decision journal: an append-only JSON Lines file, fsynced per record.

Every decision is written here *before* any action runs, so after a crash the
journal says what the controller meant to do even when the action never ran;
an `outcome` record follows once the action has run (or was skipped as dry run).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from tailbudget.errors import TailbudgetError
from tailbudget.serve.state import fsync_dir

__all__ = ["DecisionLike", "Journal", "decision_key", "decision_record"]


class DecisionLike(Protocol):
    """The fields of `tailbudget.control.engine.Decision` the act layer reads."""

    @property
    def t_s(self) -> float: ...
    @property
    def action(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def value(self) -> float | None: ...
    @property
    def threshold(self) -> float | None: ...
    @property
    def rule(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def dry_run(self) -> bool: ...


def decision_key(decision: DecisionLike) -> str:
    """A stable idempotency key: the same decision (rule, action, time) gives the same key.

    Receivers of a webhook use it to drop the duplicates that retries, or a
    restart between journaling and execution, may send.
    """
    raw = f"{decision.rule}|{decision.action}|{decision.t_s:.3f}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def decision_record(decision: DecisionLike) -> dict[str, Any]:
    """A decision as a plain JSON-able dict, with its idempotency key as `id`."""
    if dataclasses.is_dataclass(decision) and not isinstance(decision, type):
        fields = dataclasses.asdict(decision)
    else:
        fields = {
            name: getattr(decision, name)
            for name in (
                "t_s",
                "action",
                "metric",
                "value",
                "threshold",
                "rule",
                "reason",
                "dry_run",
            )
        }
    return {"id": decision_key(decision), **_jsonable(fields)}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):  # NaN, Infinity: not JSON
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return _jsonable(item())
    return str(value)


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


class Journal:
    """Append-only JSONL file; each append is flushed and fsynced before it returns."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # O_APPEND: concurrent writers (threads, or a second process by mistake)
            # never interleave inside a record.
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            fsync_dir(self.path.parent)  # the new entry survives power loss
        except OSError as exc:
            raise TailbudgetError(
                f"{self.path}: cannot open the decision journal ({exc.strerror}); "
                "give a writable state_dir",
                param="state_dir",
            ) from None
        self._lock = threading.Lock()
        self.skipped_nonfinite = 0
        """Records the last `records()` skipped for holding NaN or Infinity."""

    def append(self, record: dict[str, Any]) -> None:
        """Write one record durably (a `journaled_at` wall-clock time is added)."""
        line = json.dumps(
            {"journaled_at": round(time.time(), 6), **_jsonable(record)},
            separators=(",", ":"),
            allow_nan=False,
        )
        data = (line + "\n").encode()
        with self._lock:
            os.write(self._fd, data)
            os.fsync(self._fd)

    def append_decision(self, decision: DecisionLike) -> dict[str, Any]:
        """Journal a decision (kind `decision`) and return the record written."""
        record = {"kind": "decision", **decision_record(decision)}
        self.append(record)
        return record

    def append_outcome(self, key: str, action: str, *, ok: bool, detail: str) -> None:
        """Journal what executing a decision did (kind `outcome`)."""
        self.append({"kind": "outcome", "id": key, "action": action, "ok": ok, "detail": detail})

    def records(self) -> Iterator[dict[str, Any]]:
        """Every complete record, oldest first; a torn last line (crash mid-write) is skipped.

        A record holding NaN or Infinity (which RFC 8259 has not, and which an older
        writer let through) is skipped too, and counted in `skipped_nonfinite`."""
        self.skipped_nonfinite = 0
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                value = json.loads(line, parse_constant=_refuse_constant)
            except _NonFinite:
                self.skipped_nonfinite += 1
                continue
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(value, dict):
                yield value

    def close(self) -> None:
        """Close the file; appends after this raise."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
