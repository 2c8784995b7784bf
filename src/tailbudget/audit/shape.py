"""Step 4: input shape. For each (stage, covariate): R^2 and slope (ms per unit) of a linear
fit, from covariance and variance aggregates on the engine, plus a binned profile (about
20 quantile bins of the covariate) for plotting. A fit is flagged when R^2 >= 0.5 on the
tail driver."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailbudget.audit.context import Ctx, fnum
from tailbudget.audit.report import ProfilePoint, ShapeRow

if TYPE_CHECKING:
    import ibis.expr.types as ir

    from tailbudget.audit.sums import GroupSums

R2_FLAG = 0.5
BIN_QS: list[float] = [round(0.05 * i, 2) for i in range(1, 20)]
_CAP_QS: list[float] = [0.5, 0.95]


@dataclass(frozen=True)
class Covariate:
    """Distribution facts about one covariate from pass A."""

    name: str
    mean: float
    p50: float
    p95: float
    edges: list[float]
    complete: bool = False
    """True when every request has a value: its fits need no sums of its own over y."""


def x(ctx: Ctx, name: str) -> ir.Value:
    """A covariate as float64."""
    return ctx.t[name].cast("float64")


def covariate_exprs(ctx: Ctx) -> dict[str, ir.Value]:
    """Aggregates of the distributions pass: each covariate's mean and approximate
    quantiles (bins and caps)."""
    out: dict[str, ir.Value] = {}
    for i, name in enumerate(ctx.log.shape):
        out[f"x{i}_mean"] = x(ctx, name).mean()
        out[f"x{i}_q"] = x(ctx, name).approx_quantile(BIN_QS)
    return out


def count_exprs(ctx: Ctx) -> dict[str, ir.Value]:
    """Aggregates of the full-log figures pass: each covariate's count of values."""
    return {f"x{i}_n": x(ctx, name).count() for i, name in enumerate(ctx.log.shape)}


def covariates(ctx: Ctx, row: dict[str, Any]) -> list[Covariate]:
    """Covariate facts; a covariate with no numeric values is skipped with a note."""
    out = []
    for i, name in enumerate(ctx.log.shape):
        qs = row.get(f"x{i}_q")
        if row.get(f"x{i}_mean") is None or not qs:
            ctx.notes.append(f"covariate {name!r} has no numeric values: no shape fit")
            continue
        grid = [fnum(v) for v in qs]
        edges = sorted(set(grid))
        out.append(
            Covariate(
                name=name,
                mean=fnum(row[f"x{i}_mean"]),
                p50=grid[BIN_QS.index(0.5)],
                p95=grid[BIN_QS.index(0.95)],
                edges=edges,
                complete=row.get(f"x{i}_n") is not None and row[f"x{i}_n"] == row.get("n"),
            )
        )
    return out


def fits(group_sums: GroupSums, driver: str | None) -> list[ShapeRow]:
    """Linear fits of every (stage, covariate) from the slow-vs-fast sums (over every
    group), strongest first; a fit is flagged on the tail driver."""
    tot = group_sums.total
    names = group_sums.names
    out = []
    for i, cov in enumerate(group_sums.covariates):
        n = tot(f"nx{i}")
        if n < 2:
            continue
        mx = tot(f"sx{i}") / n
        vx = max(tot(f"sxx{i}") / n - mx * mx, 0.0)
        for j, name in enumerate(names):
            my = tot(f"syx{i}_{j}") / n
            vy = max(tot(f"syyx{i}_{j}") / n - my * my, 0.0)
            c = tot(f"sxy{i}_{j}") / n - mx * my
            # Relative guards: a constant column leaves only rounding noise in the variance.
            ok_x = vx > 1e-12 * max(mx * mx, 1.0)
            ok_y = vy > 1e-12 * max(my * my, 1.0)
            r2 = c * c / (vx * vy) if ok_x and ok_y else 0.0
            slope = c / vx if ok_x else 0.0
            out.append(
                ShapeRow(
                    stage=name,
                    covariate=cov.name,
                    r2=min(r2, 1.0),
                    slope=slope,
                    intercept=my - slope * mx,
                    flag=r2 >= R2_FLAG and name == driver,
                )
            )
    out.sort(key=lambda r: r.r2, reverse=True)
    return out


PROFILE_R2 = 0.05
"""Covariates whose best fit explains less than this get no profile (nothing to plot)."""


def profiles(
    ctx: Ctx, covs: list[Covariate], fits: list[ShapeRow]
) -> dict[tuple[str, str], list[ProfilePoint]]:
    """One grouped pass per covariate with signal: per quantile bin, n, mean x and the
    latency of the stage it fits best. Run it on the sample context: it is for plotting,
    and `n` then counts sampled requests."""
    out: dict[tuple[str, str], list[ProfilePoint]] = {}
    t = ctx.t
    for cov in covs:
        best = next((f for f in fits if f.covariate == cov.name), None)  # fits are sorted
        if best is None or best.r2 < PROFILE_R2:
            continue
        xv = x(ctx, cov.name)
        idx = xv.notnull().cast("int64") * 0
        for e in cov.edges:
            idx = idx + (xv >= e).cast("int64")
        y = ctx.col(best.stage)
        aggs: dict[str, ir.Value] = {
            "n": t.count(),
            "mx": xv.mean(),
            "m": y.mean(),
            "q": y.approx_quantile([0.5, 0.95]),
        }
        # A null covariate gives a null bin (comparisons with null are null): dropped below.
        expr = t.group_by(_bin=idx).aggregate(**aggs)
        rows = [r for r in ctx.run_frame(f"profile {cov.name}", expr) if r["_bin"] is not None]
        rows.sort(key=lambda r: fnum(r["mx"]))
        pts = []
        for r in rows:
            q = r["q"] or [None, None]
            pts.append(
                ProfilePoint(
                    x=fnum(r["mx"]),
                    n=int(r["n"]),
                    mean_ms=fnum(r["m"]),
                    p50_ms=fnum(q[0]),
                    p95_ms=fnum(q[1]),
                )
            )
        out[(best.stage, cov.name)] = pts
    return out
