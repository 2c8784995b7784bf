"""The service's snapshot file: written durably, read back only when well-formed.

Writing: the whole text goes to `snapshot.json.tmp` (every short write
continued, a write that makes no progress is a full disk), which is fsynced,
renamed over `snapshot.json` and the directory fsynced. Until the rename the
old snapshot is untouched, and the caller empties the write-ahead log only
after `write_snapshot` returned, so a failure at any step (disk full, I/O
error) leaves the previous snapshot and the whole log in place: nothing
acknowledged is lost, and the error reaches the caller (a 503 upstream).

Reading: `check_snapshot` refuses a snapshot whose keys are missing or of the
wrong type with one line naming the file and the key, instead of a traceback
deep in the restore.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tailbudget.errors import TailbudgetError

__all__ = ["SNAPSHOT_VERSION", "check_snapshot", "fsync_dir", "write_durably"]

SNAPSHOT_VERSION = 5
"""2 added per-stage windows and TBW2 log records; 3 the TBW3 log records (with a header
checksum); 4 the LLM series windows (in the controller state) and TBW4 log records
(ttft, tpot, itl); 5 the TBW5 log records (columns over every row stored without their
row indexes; the snapshot itself is as in 4). An older tailbudget reading this state dir
stops at its version check instead of replaying a log whose records it would take for
damage."""

_INTS = ("seq", "observations_total", "errors_total")
_OPTIONAL: dict[str, tuple[type, ...]] = {
    "written_at": (int, float),
    "stage_observations": (dict,),
    "desired_replicas": (int,),
    "shed": (dict, type(None)),
    "stages": (dict,),
}


def fsync_dir(path: Path) -> None:
    """Make the entries of directory `path` (a new or renamed file) survive power loss."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_durably(path: Path, data: bytes) -> None:
    """Replace `path` by `data` atomically and durably, or raise OSError leaving it as it was."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            if written <= 0:  # no progress: the file system is full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _remove(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    fsync_dir(path.parent)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):  # the original error is the one to report
        path.unlink()


def _kind(value: Any) -> str:
    return type(value).__name__


def check_snapshot(path: Path, snap: Mapping[str, Any]) -> None:
    """Raise TailbudgetError (one line, naming `path`) unless `snap` has the keys and types
    a restore reads."""

    def bad(what: str) -> TailbudgetError:
        return TailbudgetError(
            f"{path}: the state snapshot is malformed ({what}); "
            "move it away (and the log beside it) to start fresh"
        )

    for key in _INTS:
        value = snap.get(key)
        if key not in snap:
            raise bad(f"no {key!r}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad(f"{key!r} must be an integer >= 0, got {_kind(value)}")
    if not isinstance(snap.get("controller"), dict):
        raise bad(f"'controller' must be an object, got {_kind(snap.get('controller'))}")
    for key, kinds in _OPTIONAL.items():
        if key in snap and (isinstance(snap[key], bool) or not isinstance(snap[key], kinds)):
            raise bad(f"{key!r} has the wrong type ({_kind(snap[key])})")
    counts = snap.get("stage_observations", {})
    for name, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise bad(f"stage_observations[{name!r}] must be an integer >= 0")
    controller = snap["controller"]
    for key, kinds in {"rules": (dict,), "window": (dict,), "recent": (list,)}.items():
        if key in controller and not isinstance(controller[key], kinds):
            raise bad(f"controller.{key} has the wrong type ({_kind(controller[key])})")
