"""Rolling windows per pipeline stage, on the same ring as the end-to-end window.

Observations posted to `serve` may carry per-stage times. Each stage name gets
a `RollingWindow` with the policy's window and sub-windows, so a stage's p99
covers the same span as the end-to-end p99 the rules judge, and a reader can
see which stage moved when the end-to-end figure did. A rule on `<stage>.p99`
reads its stage's window; every stage is reported in `/v1/status` and `/metrics`.

Bounded: a stage whose newest observation has fallen out of the ring of the
newest stage observation is dropped. That is decided on observation times
alone, never on the wall clock, so replaying the write-ahead log rebuilds the
same set of stages. `MAX_STAGES` caps how many live at once; the service
refuses a batch that would exceed it (names made per request would otherwise
grow memory and the metrics' label sets without end).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.control.columns import StageColumn
from tailbudget.control.named_windows import NamedWindows
from tailbudget.control.windows import SlotGroups, WindowStats

__all__ = ["MAX_STAGES", "StageWindows", "stage_summary"]

MAX_STAGES = 64
"""Stage names tracked at once."""


class StageWindows(NamedWindows):
    """One rolling window per stage name."""

    def __len__(self) -> int:
        return len(self._windows)

    def tracked_after(self, ts: npt.NDArray[np.float64], stages: Mapping[str, StageColumn]) -> int:
        """How many stages `observe(ts, stages)` would leave tracked (for the cap)."""
        ids = [w.newest_id for w in self._windows.values() if w.newest_id is not None]
        newest = [float(ts[col.index].max()) for col in stages.values() if len(col)]
        if newest:
            ids.append(math.floor(max(newest) * self.sub_windows / self.window_s))
        floor_id = max(ids) - self.sub_windows + 1 if ids else 0
        live = {
            name
            for name, w in self._windows.items()
            if w.newest_id is not None and w.newest_id >= floor_id
        }
        return len(live | set(stages))

    def observe(
        self,
        ts: npt.NDArray[np.float64],
        stages: Mapping[str, StageColumn],
        groups: SlotGroups | None = None,
    ) -> None:
        """Add a batch's stage times (`ts` is the batch's timestamps, rows by index;
        `groups` their slots, from `groups(ts)`)."""
        for name, col in stages.items():
            self._observe(name, ts, col, groups)
        if stages:
            self._drop_stale()

    def _drop_stale(self) -> None:
        ids = [w.newest_id for w in self._windows.values() if w.newest_id is not None]
        if not ids:
            return
        floor_id = max(ids) - self.sub_windows + 1
        for name in [
            n for n, w in self._windows.items() if w.newest_id is None or w.newest_id < floor_id
        ]:
            del self._windows[name]

    def to_state(self) -> dict[str, Any]:
        """JSON-able state: each stage's ring."""
        return self.windows_state()

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore `to_state()` output; rings of another shape (policy changed) are skipped."""
        self.load_windows(state)


def stage_summary(stats: WindowStats) -> dict[str, Any]:
    """What status shows per stage (no error figures: errors belong to requests)."""
    return {
        "count": stats.count,
        "p50": stats.p50,
        "p95": stats.p95,
        "p99": stats.p99,
        "known": stats.known,
        "window_s": stats.window_s,
    }
