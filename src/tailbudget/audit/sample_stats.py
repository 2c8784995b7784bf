"""The row sample's figures (the CDF plots, stage quantile grids, covariate bins), computed
in NumPy from one select of the sample's values.

Exact on the sample and the same every run whatever the number of threads: an engine's
approximate quantile merges its threads' partial states in whatever order they finish, so
it is only repeatable on one thread, and a select of 250,000 rows is cheaper than that.
"""

from __future__ import annotations

from typing import Any

import ibis.expr.operations as ops
import numpy as np

from tailbudget._arrow_numpy import floats
from tailbudget.audit.context import Ctx

__all__ = ["on_sample"]


def on_sample(sub: Ctx, label: str, exprs: dict[str, Any]) -> dict[str, Any]:
    """The values of `exprs` (approximate quantiles and means, others as the engine
    computes them) over the rows of `sub`: quantiles interpolate between order statistics
    (as `quantile_cont`), and those of an integer column are rounded, as the engine's are."""

    columns: dict[str, Any] = {}
    plans: dict[str, tuple[list[float] | None, bool]] = {}
    rest: dict[str, Any] = {}
    for key, expr in exprs.items():
        op = expr.op()
        if isinstance(op, ops.ApproxMultiQuantile | ops.Mean) and op.where is None:
            qs = [float(q) for q in op.quantile.value] if hasattr(op, "quantile") else None
            columns[f"_s{len(columns)}"] = op.arg.to_expr().cast("float64")
            plans[key] = (qs, op.arg.dtype.is_integer())
        else:
            rest[key] = expr
    out = sub.run_row(label, rest) if rest else {}
    if columns:
        table = sub.run_arrow(label, sub.t.select(**columns))
        for i, (key, (qs, whole)) in enumerate(plans.items()):
            values = floats(table.column(i))
            out[key] = _figure(values[~np.isnan(values)], qs, whole)
    return out


def _figure(values: np.ndarray, qs: list[float] | None, whole: bool) -> float | list[float] | None:
    if not len(values):
        return None
    if qs is None:
        return float(values.mean())
    got = np.quantile(values, qs)
    return [float(v) for v in (np.round(got) if whole else got)]
