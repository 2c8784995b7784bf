"""Classes in `serve`: each observation's `class` field, windows per class, bounded.

An observation may carry `"class": "premium"`. The service tracks the classes of the
budget's `classes:` list; any other label folds into `other` (counted), so the label set
of `/v1/status` and `/metrics` is bounded by the budget, whatever clients send.
Observations without a class count for the service only.

Durability: a batch's classes travel in the write-ahead log as extra columns of its
stage block, under names no stage can have (a control character starts them; stage
names refuse control characters), holding each class's rows and end-to-end ms. Replaying
the log after a crash therefore rebuilds the class windows as it rebuilds the stages,
and the snapshot holds the windows and counters like the stage windows'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.budget.classes import OTHER
from tailbudget.control.columns import StageColumn

__all__ = ["FIELD", "PREFIX", "class_columns", "split_classes"]

FIELD = "class"
"""The observation's key holding its class."""
PREFIX = "\x1fclass:"
"""Start of a class column's name in the log's stage block (no stage name can start so)."""


def class_columns(
    labels: Sequence[str | None] | None,
    total_ms: npt.NDArray[np.float64],
    names: Sequence[str],
) -> dict[str, StageColumn]:
    """Per class (listed names, then `other` for any other label): its rows and total ms."""
    if labels is None or not names:
        return {}
    known = set(names)
    rows: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        if label is None:
            continue
        rows.setdefault(label if label in known else OTHER, []).append(i)
    out = {}
    for name, index in rows.items():
        idx = np.asarray(index, dtype=np.int64)
        out[PREFIX + name] = StageColumn(idx, total_ms[idx])
    return out


def split_classes(
    stages: Mapping[str, StageColumn],
) -> tuple[dict[str, StageColumn], dict[str, StageColumn]]:
    """(the stage columns, the class columns by class name) of a logged batch."""
    plain: dict[str, StageColumn] = {}
    classes: dict[str, StageColumn] = {}
    for name, col in stages.items():
        if name.startswith(PREFIX):
            classes[name.removeprefix(PREFIX)] = col
        else:
            plain[name] = col
    return plain, classes


def class_view(
    stats: Mapping[str, Any], objectives: Mapping[str, list[tuple[str, float]]]
) -> dict[str, Any]:
    """Per class: its window's figures and each e2e objective against them (`breach` when
    the window's percentile is over target, `pass` under it, `unknown` with too few)."""
    out: dict[str, Any] = {}
    for name, s in stats.items():
        judged = []
        for p, target in objectives.get(name, []):
            value = getattr(s, p, None) if s.known else None
            verdict = "unknown" if value is None else "breach" if value > target else "pass"
            judged.append(
                {"metric": "e2e", "percentile": p, "target_ms": target, "value_ms": value,
                 "verdict": verdict}
            )  # fmt: skip
        out[name] = {
            "count": s.count,
            "p50": s.p50,
            "p95": s.p95,
            "p99": s.p99,
            "known": s.known,
            "objectives": judged,
        }
    return out
