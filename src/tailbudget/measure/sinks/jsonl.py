"""JSON Lines sink: one object per request, appended in batches by the writer thread."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tailbudget.errors import TailbudgetError
from tailbudget.measure.sinks.base import Batch, Sink


class _IsoTime:
    """Epoch ns -> ISO-8601 UTC, caching the per-second prefix (batches share seconds)."""

    def __init__(self) -> None:
        self._sec = -1
        self._prefix = ""

    def __call__(self, ns: int) -> str:
        sec, rem = divmod(ns, 1_000_000_000)
        if sec != self._sec:
            self._sec = sec
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return f"{self._prefix}.{rem // 1000:06d}Z"


def _encoder() -> Callable[[Any], bytes]:
    try:  # orjson (a core dependency) is ~5x faster; the stdlib is the fallback
        import orjson

        def fast(obj: Any) -> bytes:
            return orjson.dumps(obj, default=str)

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
        self._iso = _IsoTime()
        self._dumps = _encoder()

    def write(self, batch: Batch) -> None:
        if self._fh is None:
            return
        iso, dumps = self._iso, self._dumps
        lines: list[bytes] = []
        for row in batch.rows:
            out: dict[str, Any] = dict(row)
            out["ts"] = iso(row["ts"])
            lines.append(dumps(out))
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
