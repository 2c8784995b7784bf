"""Durable service state: a snapshot plus a write-ahead log of observation batches.

The service acknowledges a batch only after the write-ahead log
(`tailbudget.serve.wal`) fsynced it, alone or in a group commit
(`tailbudget.serve.groupcommit`). On start it loads the snapshot and replays
the log records newer than it, so no acknowledged observation is lost, not
even on kill -9. `StateDir.compact` writes a fresh snapshot (atomically:
temporary file, every write checked, fsync, rename, fsync of the directory;
`tailbudget.serve.snapshot`) and only then empties the log; a crash between
the two is harmless because log records carry sequence numbers and the
snapshot says which it already holds, and a snapshot that cannot be written
leaves the old one and the log as they were.

One process at a time: the state dir is locked (an exclusive `flock` on its
`lock` file, released by the kernel when the process dies, even on kill -9).
Two servers on one directory would each compact away the other's batches.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tailbudget.errors import TailbudgetError
from tailbudget.serve.snapshot import fsync_dir, write_durably
from tailbudget.serve.wal import Batch, LogContents, ObservationLog

__all__ = ["Batch", "ObservationLog", "StateDir", "dumps_state", "fsync_dir", "loads_state"]


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
    """Strict JSON text of a state dict; bytes (serialized sketches) travel as base64.

    ValueError for NaN or Infinity anywhere: the runtime checks every figure before
    it enters the state, so one here is a bug, and a snapshot holding it would not
    be JSON (nor readable by a strict parser)."""
    return json.dumps(_enc(state), separators=(",", ":"), allow_nan=False)


class _NonFinite:
    """Where a snapshot said NaN or Infinity (written by an older, lenient writer)."""


_BAD = _NonFinite()


def loads_state(text: str, found: list[str] | None = None) -> dict[str, Any]:
    """Inverse of `dumps_state`; NaN and Infinity are read as missing (None), and a
    recent decision holding one is dropped; each is listed in `found` by its path."""
    value = _dec(json.loads(text, parse_constant=lambda _: _BAD))
    if not isinstance(value, dict):
        raise ValueError("state snapshot is not a JSON object")
    cleaned = _scrub(value, "", found if found is not None else [])
    assert isinstance(cleaned, dict)
    return cleaned


def _scrub(value: Any, path: str, found: list[str]) -> Any:
    if value is _BAD:
        found.append(path or "(top)")
        return None
    if isinstance(value, dict):
        return {k: _scrub(v, f"{path}.{k}" if path else k, found) for k, v in value.items()}
    if isinstance(value, list):
        out = []
        for i, item in enumerate(value):
            before = len(found)
            clean = _scrub(item, f"{path}[{i}]", found)
            if len(found) > before and path.endswith("recent"):
                continue  # a past decision on an impossible figure: dropped, reported
            out.append(clean)
        return out
    return value


class StateDir:
    """The service's state directory: `snapshot.json`, `observations.wal`, `journal.jsonl`."""

    SNAPSHOT = "snapshot.json"
    WAL = "observations.wal"
    JOURNAL = "journal.jsonl"
    LOCK = "lock"

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
                "give a writable state_dir",
                param="state_dir",
            ) from None
        self._lock_file = self._take_lock()
        self.snapshot_notes: list[str] = []
        """What loading the snapshot skipped or read as missing (NaN, Infinity)."""
        self.wal = ObservationLog(self.root / self.WAL)
        # A newly created log's directory entry must be durable too (power loss).
        fsync_dir(self.root)

    def _take_lock(self) -> Any:
        path = self.root / self.LOCK
        fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip()
            fh.close()
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise TailbudgetError(
                f"{self.root}: the state dir is in use by another tailbudget serve{who}; "
                "stop it or give another state_dir",
                param="state_dir",
            ) from None
        try:  # who holds it, for the message above; the lock itself is what counts
            fh.truncate(0)
            fh.write(f"{os.getpid()}\n")
            fh.flush()
        except OSError:
            pass
        return fh

    @property
    def journal_path(self) -> Path:
        """Where the decision journal lives."""
        return self.root / self.JOURNAL

    def load_snapshot(self) -> dict[str, Any] | None:
        """The last snapshot, or None on a first start."""
        path = self.root / self.SNAPSHOT
        self.snapshot_notes = []
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        found: list[str] = []
        try:
            snap = loads_state(text, found)
        except ValueError as exc:
            raise TailbudgetError(
                f"{path}: the state snapshot is unreadable ({exc}); move it away to start fresh"
            ) from None
        if found:
            shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
            self.snapshot_notes.append(
                f"{path}: {len(found)} NaN/Infinity figure(s) (not JSON) read as missing, "
                f"recent decisions holding one skipped: {shown}"
            )
        return snap

    def write_snapshot(self, state: dict[str, Any]) -> None:
        """Replace the snapshot atomically and durably (OSError leaves the old one)."""
        write_durably(self.root / self.SNAPSHOT, dumps_state(state).encode())

    def read_log(self) -> LogContents:
        """The log's intact batches, the damage skipped and the torn tail measured."""
        return self.wal.read()

    def pending(self, after_seq: int) -> Iterator[Batch]:
        """Log batches newer than the snapshot's last sequence number."""
        for batch in self.wal.batches():
            if batch.seq > after_seq:
                yield batch

    def compact(self, state: dict[str, Any]) -> None:
        """Snapshot `state` (which must include every logged batch) and empty the log.

        The caller holds off appends while this runs, so no batch lands in
        the log between the snapshot and the truncation. When the snapshot
        cannot be written the OSError propagates and the log stays whole.
        """
        self.write_snapshot(state)
        self.wal.truncate()

    def close(self) -> None:
        """Close the log and release the lock."""
        self.wal.close()
        if not self._lock_file.closed:
            self._lock_file.close()

    def __enter__(self) -> StateDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
