"""Completed traces -> one observation each: root duration, and each stage's ms on the
critical path, computed by the audit's own attribution (`logs.critical_path.path_times`)
on the batch's spans normalised by the span model (`logs.span_model`), the stages chosen
as the audit chooses them (`logs.stage_choice`, on the batch's Arrow columns)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tailbudget.control.columns import StageColumn
from tailbudget.control.stage_windows import MAX_STAGES
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.span_model import normalise
from tailbudget.logs.stage_choice import choose_on_arrow
from tailbudget.serve.batch import Batch
from tailbudget.serve.traces.assembler import OpenTrace

__all__ = ["Attributed", "Attributor"]


@dataclass(frozen=True)
class Attributed:
    """One observation per completed trace (in the order given), and the traces' ids."""

    traces: list[str]
    batch: Batch
    """Root duration, stage columns and each trace's class (its root span's `classes.by`
    attribute; `labels` None when no root carries one)."""


class Attributor:
    """Used from one thread: the receiver's (or the span processor's) flusher."""

    def __init__(self, span_stage: Literal["operation", "service"]) -> None:
        self.options = ReadOptions(span_stage=span_stage)
        self.named: tuple[str, ...] = ()
        """Stages named so far (sticky); the rest are `other`, as the audit folds them."""

    def attribute(self, traces: Sequence[OpenTrace]) -> Attributed:
        # A start-up guard: the critical path's module loads the engine (Ibis, DuckDB),
        # which an app's BudgetSpanProcessor and `serve` without traces never need.
        from tailbudget.logs.critical_path import path_times

        traces = [t for t in traces if t.root is not None]
        table, owner = _span_table(traces, self.options.span_stage)
        found = path_times(table)
        paths = pa.table(
            {
                "trace": table.column("trace"),
                "is_root": table.column("is_root"),
                "dur_ms": table.column("dur_ms"),
                "stage_raw": found.stage_raw,
                "self_ms": pa.array(found.self_ms, pa.float64()),
            }
        )
        self.named = self._choose(paths)
        roots = [t.root for t in traces if t.root is not None]
        labels = [r.label or None for r in roots]
        batch = Batch(
            ts=np.array([r.start_ns / 1e9 for r in roots], dtype=np.float64),
            total_ms=np.array([(r.end_ns - r.start_ns) / 1e6 for r in roots], dtype=np.float64),
            error=np.array([r.error for r in roots], dtype=np.bool_),
            stages=_stage_columns(paths, owner, len(roots), self.named),
            labels=labels if any(labels) else None,
        )
        return Attributed([r.trace for r in roots], batch)

    def _choose(self, paths: pa.Table) -> tuple[str, ...]:
        """The stages named so far, and the ones this batch adds (at most MAX_STAGES - 1,
        `other` being the last): a stage once named stays named, so a window keeps it."""
        if not paths.num_rows:
            return self.named
        choice = choose_on_arrow(paths, self.options)
        keep = list(self.named)
        for name in choice.keep:
            if name not in keep and len(keep) < MAX_STAGES - 1:
                keep.append(name)
        return tuple(keep)


def _span_table(
    traces: Sequence[OpenTrace], span_stage: Literal["operation", "service"]
) -> tuple[pa.Table, npt.NDArray[np.int64]]:
    """The batch's spans normalised as the span model does, and each span's trace number."""
    rows = [row for trace in traces for row in trace.spans.values()]
    owner = np.repeat(np.arange(len(traces), dtype=np.int64), [len(t.spans) for t in traces])
    return normalise(rows, span_stage), owner


def _stage_columns(
    paths: pa.Table, owner: npt.NDArray[np.int64], n: int, named: tuple[str, ...]
) -> dict[str, StageColumn]:
    """Every named stage for every trace (0 ms where the trace has none of it), the
    rest summed into `other`, as a stage column of a log is: the window's percentiles
    are then the audit's."""

    stage = pc.fill_null(paths.column("stage_raw"), "other")
    encoded = stage.combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    ms = paths.column("self_ms").to_numpy()
    columns = {stage: np.zeros(n, dtype=np.float64) for stage in named}
    for code, name in enumerate(encoded.dictionary.to_pylist()):
        label = name if name in columns else "other"
        mine = codes == code
        if label not in columns:
            columns[label] = np.zeros(n, dtype=np.float64)
        np.add.at(columns[label], owner[mine], ms[mine])
    return {name: StageColumn.every_row(values) for name, values in columns.items()}
