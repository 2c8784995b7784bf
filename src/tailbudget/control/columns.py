"""One stage's (or LLM series') times in a batch of observations: the column the windows,
the engine, replay and the service's write-ahead log all carry."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["StageColumn"]


@dataclass(frozen=True, slots=True)
class StageColumn:
    """One stage's times in a batch: which rows of the batch have it, and its ms."""

    index: npt.NDArray[np.int64]
    ms: npt.NDArray[np.float64]
    dense: bool = False
    """Known to cover every row of its batch in order (`index` is 0..n-1): readers skip
    the check. False only means not known."""

    def __len__(self) -> int:
        return int(self.ms.shape[0])

    @classmethod
    def every_row(cls, ms: npt.NDArray[np.float64]) -> StageColumn:
        """A column every observation of the batch carries, in order."""
        return cls(np.arange(ms.shape[0], dtype=np.int64), ms, dense=True)
