"""Durable service state: a snapshot plus a write-ahead log of observation batches.

The service acknowledges a batch only after the write-ahead log
(`tailbudget.control.wal`) fsynced it, alone or in a group commit
(`tailbudget.control.groupcommit`). On start it loads the snapshot and replays
the log records newer than it, so no acknowledged observation is lost, not
even on kill -9. `StateDir.compact` writes a fresh snapshot (atomically:
temporary file, fsync, rename, fsync of the directory) and then empties the
log; a crash between the two is harmless because log records carry sequence
numbers and the snapshot says which it already holds.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tailbudget.control.wal import Batch, ObservationLog
from tailbudget.errors import TailbudgetError

__all__ = ["Batch", "ObservationLog", "StateDir", "dumps_state", "fsync_dir", "loads_state"]


def fsync_dir(path: Path) -> None:
    """Make the entries of directory `path` (a new or renamed file) survive power loss."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


_BYTES = "$bytes"


def _enc(value: Any) -> Any:
    # bytes travel as {"$bytes": base64}; user keys starting with "$" get one more
    # "$", so no user dict is ever mistaken for bytes.
    if isinstance(value, bytes | bytearray | memoryview):
        return {_BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {_esc(str(k)): _enc(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_enc(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist) and not isinstance(value, str | int | float | bool):
        return tolist()
    return value


def _esc(key: str) -> str:
    return "$" + key if key.startswith("$") else key


def _dec(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get(_BYTES), str):
            return base64.b64decode(value[_BYTES])
        return {(k[1:] if k.startswith("$") else k): _dec(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dec(v) for v in value]
    return value


def dumps_state(state: dict[str, Any]) -> str:
    """JSON text of a state dict; bytes (serialized sketches) travel as base64."""
    return json.dumps(_enc(state), separators=(",", ":"))


def loads_state(text: str) -> dict[str, Any]:
    """Inverse of `dumps_state`."""
    value = _dec(json.loads(text))
    if not isinstance(value, dict):
        raise ValueError("state snapshot is not a JSON object")
    return value


class StateDir:
    """The service's state directory: `snapshot.json`, `observations.wal`, `journal.jsonl`."""

    SNAPSHOT = "snapshot.json"
    WAL = "observations.wal"
    JOURNAL = "journal.jsonl"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise TailbudgetError(
                f"{self.root}: state dir is not writable ({exc.strerror}); "
                "give a writable --state-dir"
            ) from None
        self.wal = ObservationLog(self.root / self.WAL)
        # A newly created log's directory entry must be durable too (power loss).
        fsync_dir(self.root)

    @property
    def journal_path(self) -> Path:
        """Where the decision journal lives."""
        return self.root / self.JOURNAL

    def load_snapshot(self) -> dict[str, Any] | None:
        """The last snapshot, or None on a first start."""
        path = self.root / self.SNAPSHOT
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            return loads_state(text)
        except ValueError as exc:
            raise TailbudgetError(
                f"{path}: the state snapshot is unreadable ({exc}); move it away to start fresh"
            ) from None

    def write_snapshot(self, state: dict[str, Any]) -> None:
        """Replace the snapshot atomically and durably."""
        path = self.root / self.SNAPSHOT
        tmp = path.with_suffix(".json.tmp")
        data = dumps_state(state).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(self.root)

    def pending(self, after_seq: int) -> Iterator[Batch]:
        """Log batches newer than the snapshot's last sequence number."""
        for batch in self.wal.batches():
            if batch.seq > after_seq:
                yield batch

    def compact(self, state: dict[str, Any]) -> None:
        """Snapshot `state` (which must include every logged batch) and empty the log.

        The caller holds off appends while this runs, so no batch lands in
        the log between the snapshot and the truncation.
        """
        self.write_snapshot(state)
        self.wal.truncate()

    def close(self) -> None:
        """Close the log."""
        self.wal.close()
