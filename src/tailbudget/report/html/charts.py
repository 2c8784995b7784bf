"""Audit charts: latency CDF, per-stage percentiles vs budget, slow-vs-fast deltas,
shape profiles, cohorts. Each returns an inline SVG string, or None when the data
is missing (the page then says why).

Every series carries a gid `tb-<chart>-<series>` (per-item suffix `-<i>` where a
series is drawn as several artists) so tests and readers can find it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.ticker import FuncFormatter, NullLocator

from tailbudget import _fmt as fmt
from tailbudget._units import PERCENTILES, quantile_of
from tailbudget.audit.report import AuditReport, CohortRow, ShapeRow, StageRow, Tail
from tailbudget.report.html.svg import (
    BLUE,
    GREY,
    INK,
    P95,
    P99,
    PCT_COLORS,
    new_figure,
    slo_line,
    style,
    to_svg,
)


def _ms_tick(v: float, _pos: object = None) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 or float(v).is_integer() else f"{v:,.1f}"


def cdf_chart(r: AuditReport) -> str | None:
    """Latency CDF on log-x, logit-y (so p99 and p99.9 get room) with SLO lines."""
    pts = sorted((p.ms, p.q) for p in r.cdf if p.ms > 0 and 0 < p.q < 1)
    if len(pts) < 2:
        return None
    ms = np.array([p[0] for p in pts])
    q = np.array([p[1] for p in pts])
    with style("cdf"):
        fig = new_figure()
        ax = fig.add_subplot()
        (line,) = ax.plot(ms, q, color=BLUE, lw=2, label="requests (CDF)")
        line.set_gid("tb-cdf-curve")
        ax.set_xscale("log")
        ax.set_yscale("logit")
        top = max(0.999, float(q.max()))
        ax.set_ylim(max(0.01, float(q.min())), top)
        for p in PERCENTILES:
            target = getattr(r.slo, p)
            if target is not None:
                ln = ax.axvline(
                    target,
                    color=PCT_COLORS[p],
                    ls="--",
                    lw=1.3,
                    label=f"{p} SLO {fmt.ms(target)} ms",
                )
                ln.set_gid(f"tb-cdf-slo-{p}")
        measured = [(float(getattr(r.snapshot, p)), quantile_of(p), p) for p in PERCENTILES]
        if measured:
            sc = ax.scatter(
                [m[0] for m in measured],
                [m[1] for m in measured],
                color=INK,
                zorder=5,
                s=22,
                label="measured p50/p95/p99",
            )
            sc.set_gid("tb-cdf-measured")
            for x, y, p in measured:
                ax.annotate(
                    f"{p} {fmt.ms(x)} ms",
                    (x, y),
                    xytext=(5, -10),
                    textcoords="offset points",
                    fontsize=8,
                )
        ax.xaxis.set_major_formatter(FuncFormatter(_ms_tick))
        ax.yaxis.set_minor_locator(NullLocator())  # logit minor ticks: clutter, and slow to lay out
        ax.set_xlabel("end-to-end latency (ms, log scale)")
        ax.set_ylabel("percentile (logit scale)")
        ax.set_title("Latency distribution vs SLO")
        ax.legend(loc="lower right")
        return to_svg(fig)


def _budget_ticks(
    ax: Any, rows: Sequence[StageRow], pos: np.ndarray, width: float, sideways: bool
) -> list[float]:
    """Each stage budget as a black tick on its bar; the budgets drawn, for the axis range."""
    at, val = [], []
    for i, s in enumerate(rows):
        budget = s.budget or {}
        for k, p in enumerate(PERCENTILES):
            if p in budget:
                at.append(pos[i] + (1 - k if sideways else k - 1) * width)
                val.append(budget[p])
    if at:
        xy = (val, at) if sideways else (at, val)
        (ln,) = ax.plot(
            *xy,
            ls="none",
            marker="|" if sideways else "_",
            markersize=13 if sideways else 17,
            mew=2.4,
            color=INK,
            label="stage budget",
        )
        ln.set_gid("tb-stages-budget")
    return val


def stage_chart(rows: Sequence[StageRow]) -> str | None:
    """Grouped bars of each stage's p50/p95/p99, with its budget as a black tick.

    Long stage names (e.g. RPC operation names) or many stages turn the bars
    sideways so the names stay readable.
    """
    if not rows:
        return None
    names = [s.name for s in rows]
    sideways = len(rows) > 6 or max(len(n) for n in names) > 14
    pos = np.arange(len(rows))[::-1] if sideways else np.arange(len(rows))
    width = 0.26
    with style("stages"):
        fig = new_figure(7.6, max(3.6, 0.55 * len(rows) + 1.4) if sideways else 3.6)
        ax = fig.add_subplot()
        for k, p in enumerate(PERCENTILES):
            vals = [float(getattr(s, p)) for s in rows]
            # Sideways, p50 sits on top of each group, as in the legend's reading order.
            off = (1 - k if sideways else k - 1) * width
            draw = ax.barh if sideways else ax.bar
            bars = draw(pos + off, vals, width, color=PCT_COLORS[p], label=p)
            for i, bar in enumerate(bars):
                bar.set_gid(f"tb-stages-{p}-{i}")
        val = _budget_ticks(ax, rows, pos, width, sideways)
        heights = [float(getattr(s, p)) for s in rows for p in PERCENTILES if getattr(s, p) > 0]
        log = bool(heights) and max(heights + val) / min(heights + val) > 30
        axis = ax.xaxis if sideways else ax.yaxis
        if log:
            # Stages span orders of magnitude; on a linear axis the small ones vanish.
            (ax.set_xscale if sideways else ax.set_yscale)("log")
        axis.set_major_formatter(FuncFormatter(_ms_tick))
        label = "stage latency (ms, log scale)" if log else "stage latency (ms)"
        if sideways:
            ax.set_yticks(pos, names)
            ax.set_xlabel(label)
            ax.set_ylabel("stage")
            ax.grid(axis="y", visible=False)
        else:
            ax.set_xticks(pos, names)
            ax.set_ylabel(label)
            ax.set_xlabel("stage")
            ax.grid(axis="x", visible=False)
        ax.set_title("Per-stage percentiles vs stage budget")
        fig.legend(ncols=4, loc="outside lower center")
        return to_svg(fig)


def delta_chart(tail: Tail) -> str | None:
    """Horizontal bars: how much longer each stage is in slow requests than in fast ones."""
    if not tail.deltas:
        return None
    rows = sorted(tail.deltas, key=lambda d: d.delta)
    with style("delta"):
        fig = new_figure(7.6, max(2.2, 0.45 * len(rows) + 1.2))
        ax = fig.add_subplot()
        y = np.arange(len(rows))
        vals = [d.delta for d in rows]
        colors = [P99 if v == max(vals) and v > 0 else BLUE if v >= 0 else GREY for v in vals]
        bars = ax.barh(y, vals, color=colors, height=0.6)
        for i, (bar, d) in enumerate(zip(bars, rows, strict=True)):
            bar.set_gid(f"tb-delta-bar-{i}")
            part = tail.share_of_gap(d)
            share = f" ({fmt.share(part, 0)})" if part is not None else ""
            ax.annotate(
                f"{fmt.ms(d.delta)} ms{share}",
                (max(d.delta, 0), i),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        ax.set_yticks(y, [d.stage for d in rows])
        ax.axvline(0, color=INK, lw=0.8)
        ax.set_xlim(min(0.0, min(vals) * 1.1), max(vals) * 1.25 if max(vals) > 0 else 1)
        ax.xaxis.set_major_formatter(FuncFormatter(_ms_tick))
        ax.set_xlabel("mean in slow requests minus mean in fast requests (ms)")
        ax.set_ylabel("stage")
        ax.set_title("Where the slow requests spend their extra time")
        ax.grid(axis="y", visible=False)
        return to_svg(fig)


def shape_chart(entry: ShapeRow, key: str) -> str | None:
    """Binned latency vs a covariate (mean, p50, p95 per bin) with the fitted line."""
    prof = entry.profile
    if len(prof) < 2:
        return None
    x = np.array([b.x for b in prof])
    n = np.array([float(b.n) for b in prof])
    mean = np.array([b.mean_ms for b in prof])
    stage, cov = entry.stage, entry.covariate
    with style(f"shape-{key}"):
        fig = new_figure(7.6, 3.3)
        ax = fig.add_subplot()
        for p, ys, color in (
            ("p95", [b.p95_ms for b in prof], P95),
            ("p50", [b.p50_ms for b in prof], PCT_COLORS["p50"]),
        ):
            (ln,) = ax.plot(x, ys, color=color, lw=1.6, marker=".", label=f"{p} per bin")
            ln.set_gid(f"tb-shape-{key}-{p}")
        sizes = 12 + 60 * n / n.max()
        sc = ax.scatter(
            x, mean, s=sizes, color=BLUE, zorder=4, label="mean per bin (size = requests)"
        )
        sc.set_gid(f"tb-shape-{key}-mean")
        xs = np.linspace(x.min(), x.max(), 50)
        (fit,) = ax.plot(
            xs,
            entry.intercept + entry.slope * xs,
            color=INK,
            ls="--",
            lw=1.4,
            label=f"fit: {fmt.number(entry.slope)} ms per unit, R\u00b2 {fmt.r2(entry.r2)}",
        )
        fit.set_gid(f"tb-shape-{key}-fit")
        ax.yaxis.set_major_formatter(FuncFormatter(_ms_tick))
        ax.set_xlabel(f"{cov} (bin centre)")
        ax.set_ylabel(f"{stage} latency (ms)")
        ax.set_title(f"{stage} latency vs {cov}")
        ax.legend(loc="upper left")
        return to_svg(fig)


def cohort_chart(rows: Sequence[CohortRow], global_p99: float, slo_p99: float | None) -> str | None:
    """Each cohort's p99 against its share of traffic; flagged cohorts in red."""
    if not rows:
        return None
    with style("cohorts"):
        fig = new_figure(7.6, 3.6)
        ax = fig.add_subplot()
        flagged = [c.flag for c in rows]
        for is_flag, gid, color, label in (
            (False, "points", BLUE, "cohort"),
            (True, "flagged", P99, "flagged cohort"),
        ):
            pick = [c for c, f in zip(rows, flagged, strict=True) if f is is_flag]
            if not pick:
                continue
            sc = ax.scatter(
                [c.share * 100 for c in pick],
                [c.p99 for c in pick],
                s=[20 + 180 * c.share_of_slow for c in pick],
                color=color,
                alpha=0.85,
                edgecolor="white",
                zorder=4,
                label=label,
            )
            sc.set_gid(f"tb-cohorts-{gid}")

        # Label only the most telling points so the chart stays readable.
        def badness(c: CohortRow) -> float:
            return c.p99 * (2 if c.flag else 1)

        for c in sorted(rows, key=badness, reverse=True)[:8]:
            ax.annotate(
                f"{c.dim}={c.value}",
                (c.share * 100, c.p99),
                xytext=(5, 3),
                textcoords="offset points",
                fontsize=7.5,
            )
        ln = ax.axhline(
            global_p99,
            color=GREY,
            ls=":",
            lw=1.3,
            label=f"all traffic p99 {fmt.ms(global_p99)} ms",
        )
        ln.set_gid("tb-cohorts-global")
        if slo_p99 is not None:
            slo_line(ax, slo_p99, max(c.p99 for c in rows), "tb-cohorts-slo")
        ax.set_xlim(left=0)
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo - 0.05 * (hi - lo), hi)  # so a line at the lowest value stays visible
        ax.yaxis.set_major_formatter(FuncFormatter(_ms_tick))
        ax.set_xlabel("share of traffic (%), point size = share of slow requests")
        ax.set_ylabel("cohort p99 (ms)")
        ax.set_title("Cohort p99 vs traffic share")
        ax.legend(loc="best")
        return to_svg(fig)
