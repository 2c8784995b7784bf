"""JSON Lines sink: one object per request, appended in batches by the writer thread."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tailbudget.errors import TailbudgetError
from tailbudget.measure.sinks.base import Batch, Sink


def _encoder() -> Callable[[Any], bytes]:
    try:  # orjson (a core dependency) is ~5x faster; the stdlib is the fallback
        import orjson

        # A partial is called from C: no Python frame per row.
        fast: Callable[[Any], bytes] = functools.partial(orjson.dumps, default=str)
        return fast
    except ImportError:
        encode = json.JSONEncoder(default=str, separators=(",", ":")).encode
        return lambda obj: encode(obj).encode()


class JsonlSink(Sink):
    """Appends records to a `.jsonl` file (ts as ISO-8601 UTC, durations in ms)."""

    name = "jsonl"

    def __init__(self, path: str | Path, *, append: bool = True) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh: IO[bytes] | None = self.path.open("ab" if append else "wb")
        except OSError as exc:
            raise TailbudgetError(
                f"cannot open JSONL sink {str(path)!r}: {exc.strerror}; give a writable path"
            ) from exc
        self._dumps = _encoder()

    def write(self, batch: Batch) -> None:
        if self._fh is None:
            return
        dumps = self._dumps
        lines = [dumps(row) for row in batch.rows]
        if lines:
            lines.append(b"")
            self._fh.write(b"\n".join(lines))

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            self._fh.close()
            self._fh = None
