"""Nested stage columns: which stage's time contains which (RPC logs such as DeLag's).

Stage A contains stage B when A >= B in nearly every request and A moves with B
one-for-one (slope of A on B near 1, some correlation): B's time is inside A's.
A gateway-like name (gateway, frontend, proxy, ingress) with A >= B everywhere is
enough. One aggregate of sums and cross products on the engine gives every pair.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from tailbudget.audit.context import OVERLAP_TOLERANCE_MS, Ctx, fnum
from tailbudget.audit.report import Nesting

__all__ = ["MAX_NESTED_STAGES", "direct", "find", "find_arrays"]

WITHIN = 0.99
"""Share of requests where the outer stage is at least the inner one."""
SLOPE = (0.75, 1.25)
MIN_CORR = 0.2
MAX_NESTED_STAGES = 24
"""Pairs are checked among at most this many stages (the largest by mean)."""
_CONTAINER = re.compile(r"gateway|frontend|proxy|ingress", re.IGNORECASE)


def find(ctx: Ctx, names: list[str]) -> list[Nesting]:
    """Containment pairs among the stages, from one pass over the log."""
    names = names[:MAX_NESTED_STAGES]
    if len(names) < 2:
        return []
    cols = [ctx.col(n).fill_null(0.0) for n in names]
    exprs: dict[str, Any] = {"n": ctx.t.count()}
    for i, a in enumerate(cols):
        exprs[f"s{i}"] = a.sum()
        exprs[f"q{i}"] = (a * a).sum()
        for j, b in enumerate(cols):
            if i == j:
                continue
            exprs[f"ge{i}_{j}"] = ctx.count(a >= b - OVERLAP_TOLERANCE_MS)
            if i < j:
                exprs[f"x{i}_{j}"] = (a * b).sum()
    row = ctx.run_row("nesting", exprs)
    return _pairs(names, {k: fnum(v) for k, v in row.items()})


def find_arrays(times: dict[str, Any]) -> list[Nesting]:
    """The same pairs from per-request NumPy arrays (`init --from`'s profile): one rule for
    the audit's `nesting[]` and the budget it writes."""
    names = sorted(times, key=lambda s: -float(np.mean(times[s])))[:MAX_NESTED_STAGES]
    if len(names) < 2:
        return []
    cols = [np.nan_to_num(np.asarray(times[s], dtype=np.float64)) for s in names]
    row: dict[str, float] = {"n": float(cols[0].size)}
    for i, a in enumerate(cols):
        row[f"s{i}"], row[f"q{i}"] = float(a.sum()), float((a * a).sum())
        for j, b in enumerate(cols):
            if i != j:
                row[f"ge{i}_{j}"] = float(np.count_nonzero(a >= b - OVERLAP_TOLERANCE_MS))
            if i < j:
                row[f"x{i}_{j}"] = float((a * b).sum())
    return _pairs(names, row)


def _pairs(names: list[str], row: dict[str, float]) -> list[Nesting]:
    """Containment pairs from the aggregates: n, s (sums), q (squares), ge, x (cross)."""
    n = row.get("n", 0.0)
    if n < 3:
        return []
    mean = [row[f"s{i}"] / n for i in range(len(names))]
    var = [max(row[f"q{i}"] / n - mean[i] ** 2, 0.0) for i in range(len(names))]
    out = []
    for i, outer in enumerate(names):
        for j, inner in enumerate(names):
            if i == j or mean[i] <= mean[j]:
                continue
            within = row[f"ge{i}_{j}"] / n
            if within < WITHIN:
                continue
            cross = row[f"x{min(i, j)}_{max(i, j)}"] / n - mean[i] * mean[j]
            slope = cross / var[j] if var[j] > 0 else 0.0
            corr = cross / math.sqrt(var[i] * var[j]) if var[i] > 0 and var[j] > 0 else 0.0
            if SLOPE[0] <= slope <= SLOPE[1] and corr >= MIN_CORR:
                how = "co-movement"
            elif _CONTAINER.search(outer):
                how = "name"
            else:
                continue
            out.append(Nesting(outer=outer, inner=inner, how=how, share_within=within, slope=slope))
    return out


def direct(pairs: list[Nesting]) -> dict[str, list[str]]:
    """{outer: inner stages directly inside it} (not through another inner stage)."""
    inside: dict[str, set[str]] = {}
    for p in pairs:
        inside.setdefault(p.outer, set()).add(p.inner)
    out: dict[str, list[str]] = {}
    for outer, inners in inside.items():
        out[outer] = sorted(
            b for b in inners if not any(b in inside.get(c, set()) for c in inners if c != b)
        )
    return out
