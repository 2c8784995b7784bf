"""Reading `--events CSV` (scale-ups, deploys): columns timestamp (or ts, time) and event."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

from tailbudget.errors import TailbudgetError

_TIME_COLUMNS = ("timestamp", "ts", "time", "t")
MAX_EVENTS = 500


def parse_time(value: str) -> datetime:
    """ISO-8601 (naive = UTC) or epoch seconds."""
    text = value.strip()
    try:
        return datetime.fromtimestamp(float(text), tz=UTC)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise TailbudgetError(
            f"event time {value!r} is neither ISO-8601 (2026-03-01T12:00:00Z) nor epoch seconds"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def read_events(path: Path) -> tuple[tuple[datetime, str], ...]:
    """Events sorted by time; a bad file or row is a one-line error naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TailbudgetError(f"{path}: cannot read events file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise TailbudgetError(
            f"{path}: the events file is not UTF-8 text (byte {exc.start}); "
            "write a CSV with columns timestamp,event"
        ) from None
    if "\0" in text:
        raise TailbudgetError(
            f"{path}: the events file holds NUL bytes (binary?); "
            "write a CSV with columns timestamp,event"
        )
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise TailbudgetError(f"{path}: no events; write a CSV with columns timestamp,event")
    header = {k.strip().lower(): k for k in rows[0] if k}
    tcol = next((header[c] for c in _TIME_COLUMNS if c in header), None)
    if tcol is None:
        raise TailbudgetError(
            f"{path}: no timestamp column (found {', '.join(header.values())}); "
            "write a CSV with columns timestamp,event"
        )
    ecol = header.get("event")
    out = []
    for i, row in enumerate(rows, start=2):
        raw = (row.get(tcol) or "").strip()
        if not raw:
            raise TailbudgetError(f"{path}:{i}: empty timestamp")
        try:
            when = parse_time(raw)
        except TailbudgetError as exc:
            raise TailbudgetError(f"{path}:{i}: {exc}") from None
        out.append((when, (row.get(ecol) or "event").strip() if ecol else "event"))
    if len(out) > MAX_EVENTS:
        raise TailbudgetError(f"{path}: {len(out)} events; at most {MAX_EVENTS} are supported")
    return tuple(sorted(out))
