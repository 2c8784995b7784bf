"""Rolling windows by name on one ring: what the stage and LLM-series windows share.

Every name (a stage, `ttft`, `tpot`, `itl`) gets a `RollingWindow` with the
policy's window and sub-windows, so its percentiles cover the span the
end-to-end ones cover; the stats, the snapshot form and its restore are the
same for both kinds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.control.columns import StageColumn
from tailbudget.control.windows import (
    RollingWindow,
    SlotGroups,
    WindowStats,
    slot_groups,
)

__all__ = ["NamedWindows"]


class NamedWindows:
    """One `RollingWindow` per name, made on first use."""

    def __init__(self, window_s: float, sub_windows: int) -> None:
        self.window_s = float(window_s)
        self.sub_windows = int(sub_windows)
        self._windows: dict[str, RollingWindow] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._windows

    def window(self, name: str) -> RollingWindow | None:
        """The window of `name`, None before its first value."""
        return self._windows.get(name)

    def _window(self, name: str) -> RollingWindow:
        window = self._windows.get(name)
        if window is None:
            window = self._windows[name] = RollingWindow(self.window_s, self.sub_windows)
        return window

    def _observe(
        self,
        name: str,
        ts: npt.NDArray[np.float64],
        col: StageColumn,
        groups: SlotGroups | None,
    ) -> None:
        """Add a column; one over every row in order reuses the batch's slot `groups`."""
        window = self._window(name)
        n = int(ts.shape[0])
        if groups is not None and len(col) == n and (col.dense or _every_row(col.index)):
            window.observe_many(ts, col.ms, groups=groups)
        else:
            window.observe_many(ts[col.index], col.ms)

    def groups(self, ts: npt.NDArray[np.float64]) -> SlotGroups | None:
        """The slot groups of a batch's timestamps on this ring (None: some not finite)."""
        if not ts.size or not np.isfinite(ts).all():
            return None
        return slot_groups(ts, self.window_s / self.sub_windows)

    def stats(
        self,
        now_s: float,
        *,
        min_samples: int,
        confidence: float,
        qs: Mapping[str, Iterable[float]] | None = None,
    ) -> dict[str, WindowStats]:
        """Each window's stats at `now_s` by name (`qs`: further quantiles by name)."""
        want = qs or {}
        return {
            name: w.stats(
                now_s, min_samples=min_samples, confidence=confidence, qs=want.get(name, ())
            )
            for name, w in sorted(self._windows.items())
        }

    def windows_state(self) -> dict[str, Any]:
        """JSON-able state of every window's ring, by name."""
        return {name: w.to_state() for name, w in sorted(self._windows.items())}

    def load_windows(self, state: Mapping[str, Any]) -> None:
        """Restore `windows_state()` output; rings of another shape (policy changed) are
        skipped."""
        self._windows = {}
        for name, raw in state.items():
            window = RollingWindow(self.window_s, self.sub_windows)
            window.load_state(raw)
            if window.newest_id is not None:
                self._windows[str(name)] = window


def _every_row(index: npt.NDArray[np.int64]) -> bool:
    """Rows 0..n-1 in order (a column every observation of the batch carries)."""
    n = index.shape[0]
    return bool(index[0] == 0 and index[-1] == n - 1 and (np.diff(index) == 1).all())
