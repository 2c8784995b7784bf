"""Step 4: input shape. For each (stage, covariate): R^2 and slope (ms per unit) of a linear
fit, from covariance and variance aggregates on the engine, plus a binned profile (about
20 quantile bins of the covariate) for plotting. A fit is flagged when R^2 >= 0.5 on the
tail driver."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailbudget.audit.context import Ctx, fnum
from tailbudget.audit.report import ProfilePoint, ShapeRow

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


def x(ctx: Ctx, name: str) -> Any:
    """A covariate as float64."""
    return ctx.t[name].cast("float64")


def exprs_a(ctx: Ctx) -> dict[str, Any]:
    """Pass A: each covariate's mean and approximate quantiles (bins and caps)."""
    out: dict[str, Any] = {}
    for i, name in enumerate(ctx.log.shape):
        out[f"x{i}_mean"] = x(ctx, name).mean()
        out[f"x{i}_q"] = x(ctx, name).approx_quantile(BIN_QS)
    return out


def build_a(ctx: Ctx, row: dict[str, Any]) -> list[Covariate]:
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
            )
        )
    return out


def exprs_b(ctx: Ctx, covs: list[Covariate], names: list[str]) -> dict[str, Any]:
    """Pass B: covariance and variances for every (stage, covariate) pair."""
    out: dict[str, Any] = {}
    for i, cov in enumerate(covs):
        xv = x(ctx, cov.name)
        out[f"c{i}_vx"] = xv.var(how="pop")
        for j, name in enumerate(names):
            y = ctx.col(name)
            out[f"c{i}_{j}_cov"] = xv.cov(y, how="pop")
            out[f"c{i}_{j}_vy"] = y.var(how="pop", where=xv.notnull())
            out[f"c{i}_{j}_my"] = y.mean(where=xv.notnull())
    return out


def build_b(
    row: dict[str, Any], covs: list[Covariate], names: list[str], driver: str | None
) -> list[ShapeRow]:
    """Fits, strongest first."""
    out = []
    for i, cov in enumerate(covs):
        vx = fnum(row.get(f"c{i}_vx"))
        for j, name in enumerate(names):
            c = fnum(row.get(f"c{i}_{j}_cov"))
            vy = fnum(row.get(f"c{i}_{j}_vy"))
            my = fnum(row.get(f"c{i}_{j}_my"))
            r2 = c * c / (vx * vy) if vx > 0 and vy > 0 else 0.0
            slope = c / vx if vx > 0 else 0.0
            out.append(
                ShapeRow(
                    stage=name,
                    covariate=cov.name,
                    r2=min(r2, 1.0),
                    slope=slope,
                    intercept=my - slope * cov.mean,
                    flag=r2 >= R2_FLAG and name == driver,
                )
            )
    out.sort(key=lambda r: r.r2, reverse=True)
    return out


def profiles(ctx: Ctx, covs: list[Covariate], names: list[str]) -> dict[tuple[str, str], list[ProfilePoint]]:
    """One grouped pass per covariate: per quantile bin, n, mean x and each stage's level."""
    out: dict[tuple[str, str], list[ProfilePoint]] = {}
    t = ctx.t
    for cov in covs:
        xv = x(ctx, cov.name)
        idx = xv.notnull().cast("int64") * 0
        for e in cov.edges:
            idx = idx + (xv >= e).cast("int64")
        aggs: dict[str, Any] = {"n": t.count(), "mx": xv.mean()}
        for j, name in enumerate(names):
            y = ctx.col(name)
            aggs[f"m{j}"] = y.mean()
            aggs[f"q{j}"] = y.approx_quantile([0.5, 0.95])
        # A null covariate gives a null bin (comparisons with null are null): dropped below.
        expr = t.group_by(_bin=idx).aggregate(**aggs)
        rows = [r for r in ctx.run_frame(f"profile {cov.name}", expr) if r["_bin"] is not None]
        rows.sort(key=lambda r: fnum(r["mx"]))
        for j, name in enumerate(names):
            pts = []
            for r in rows:
                q = r[f"q{j}"] or [None, None]
                pts.append(
                    ProfilePoint(
                        x=fnum(r["mx"]),
                        n=int(r["n"]),
                        mean_ms=fnum(r[f"m{j}"]),
                        p50_ms=fnum(q[0]),
                        p95_ms=fnum(q[1]),
                    )
                )
            out[(name, cov.name)] = pts
    return out
