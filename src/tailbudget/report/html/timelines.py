"""Time charts: the cold-start timeline with deploy events, and the replay timeline
of window p95/p99 with policy thresholds and every controller decision marked."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
from matplotlib.ticker import FuncFormatter

from tailbudget import _fmt as fmt
from tailbudget.audit.report import ColdStart
from tailbudget.control.replay_record import ReplayPoint, ReplayReport
from tailbudget.report.html.page import is_num
from tailbudget.report.html.svg import (
    BLUE,
    GREEN,
    GREY,
    INK,
    P95,
    P99,
    PURPLE,
    new_figure,
    slo_line,
    style,
    to_svg,
)

# Decision colours stay clear of the p95/p99 series colours so a mark never reads as data.
ACTION_COLORS = {
    "scale_up": BLUE,
    "scale_down": "#56B4E9",
    "trim_logging": "#8c6d31",
    "restore_logging": "#bcbd22",
    "shed_load": INK,
    "stop_shedding": GREEN,
    "rollback": PURPLE,
}


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 string (or epoch seconds) as an aware UTC datetime; None if unparsable."""
    try:
        if is_num(value):
            return datetime.fromtimestamp(float(value), tz=UTC)
        dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except (ValueError, OverflowError, OSError):
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _ms_tick(v: float, _pos: object = None) -> str:
    return f"{v:,.0f}"


def cold_start_chart(cold: ColdStart, slo_p99: float | None) -> str | None:
    """Per-minute p99 over time, deploy/restart events as lines, the cold window shaded."""
    pts = []
    for row in cold.timeline:
        t = parse_time(row.t)
        if t is not None:
            pts.append((t, row.p99))
    if len(pts) < 2:
        return None
    pts.sort()
    events = [(parse_time(e.t), e.event) for e in cold.events]
    window = cold.window_min
    with style("cold"):
        fig = new_figure(7.6, 3.4)
        ax = fig.add_subplot()
        (ln,) = ax.plot(
            date2num([p[0] for p in pts]),  # type: ignore[no-untyped-call]
            [p[1] for p in pts],
            color=BLUE,
            lw=1.6,
            marker=".",
            label="p99 per minute",
        )
        ln.set_gid("tb-cold-p99")
        lo, hi = pts[0][0] - timedelta(minutes=window), pts[-1][0]
        shown = [(t, name) for t, name in events if t is not None and lo <= t <= hi]
        for i, (t, name) in enumerate(shown):
            x0, x1 = date2num([t, t + timedelta(minutes=window)])  # type: ignore[no-untyped-call]
            names = sorted({n for _, n in shown})
            label = f"event: {', '.join(names)[:40]} ({len(shown)})"
            ev = ax.axvline(x0, color=PURPLE, lw=1.4, label=label if i == 0 else None)
            ev.set_gid(f"tb-cold-event-{i}")
            span = ax.axvspan(
                x0,
                x1,
                color=PURPLE,
                alpha=0.12,
                lw=0,
                label=f"first {window:g} min after" if i == 0 else None,
            )
            span.set_gid(f"tb-cold-window-{i}")
            if len(shown) > 3:
                continue  # many events: their labels would overprint; the table lists them
            ax.annotate(
                name,
                (x0, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -10),
                textcoords="offset points",
                fontsize=7.5,
                color=PURPLE,
            )
        if slo_p99 is not None:
            slo_line(ax, slo_p99, max(p[1] for p in pts), "tb-cold-slo")
        loc = AutoDateLocator()  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(loc)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(loc, tz=UTC))  # type: ignore[no-untyped-call]
        ax.yaxis.set_major_formatter(FuncFormatter(_ms_tick))
        ax.set_ylim(bottom=0)
        ax.set_xlabel("time (UTC)")
        ax.set_ylabel("p99 latency (ms)")
        ax.set_title("Cold start: p99 per minute around events")
        ax.legend(loc="upper right")
        return to_svg(fig)


class Threshold(NamedTuple):
    """One policy rule's line on the replay chart."""

    metric: str
    """p50/p95/p99 (ms, a baseline ratio turned into ms) or error_rate (a share)."""
    label: str
    value: float
    action: str


# Threshold lines differ in dash pattern and colour (the action's), and each is labelled
# at its right end, so three p95 rules at 1.8, 2.8 and 3 s never read as one line.
_DASHES = ((0, (6, 2)), (0, (2, 1.5)), (0, (7, 2, 1.5, 2)), (0, (1, 1)), (0, (10, 3)))


def rule_thresholds(replay: ReplayReport) -> list[Threshold]:
    """One Threshold per rule: ms for p50/p95/p99 (a p99_vs_baseline ratio is turned
    into ms when the baseline is known), a share for error_rate."""
    base = replay.baseline_p99_ms
    if base is None:
        base = replay.policy.baseline_p99_ms
    out = []
    for r in replay.policy.rules:
        metric, thr, action = r.metric, r.threshold, r.action
        if metric in ("p50", "p95", "p99"):
            label = f"{action}: {metric} > {fmt.threshold(metric, thr)}"
            out.append(Threshold(metric, label, thr, action))
        elif metric == "p99_vs_baseline" and base is not None:
            ms = thr * base
            label = f"{action}: p99 > {fmt.threshold(metric, thr)} baseline ({fmt.ms(ms)} ms)"
            out.append(Threshold("p99", label, ms, action))
        elif metric == "error_rate":
            label = f"{action}: errors > {fmt.threshold(metric, thr)}"
            out.append(Threshold("error_rate", label, thr, action))
    return out


def _threshold_line(ax: Any, i: int, th: Threshold, y: float, gid: str) -> None:
    color = ACTION_COLORS.get(th.action, P99)
    line = ax.axhline(y, color=color, ls=_DASHES[i % len(_DASHES)], lw=1.1, label=th.label)
    line.set_gid(gid)
    # The label sits on the line; successive labels step left so close lines stay legible.
    text = ax.text(
        0.99 - 0.2 * (i % 4),
        y,
        th.label.split(":", 1)[0],
        transform=ax.get_yaxis_transform(),
        ha="right",
        va="bottom",
        fontsize=7,
        color=color,
    )
    text.set_gid(f"{gid}-label")


def _series(timeline: Sequence[ReplayPoint], key: str) -> np.ndarray:
    # Unknown windows (too few samples) are gaps, not zeros.
    values = (getattr(w, key) if w.known else None for w in timeline)
    return np.array([np.nan if v is None else float(v) for v in values])


def _decision_lines(ax: Any, ax2: Any, replay: ReplayReport, scale: float) -> None:
    """One vertical line per decision (in both panels), and the value that triggered it."""
    seen: set[str] = set()
    px, py = [], []
    for i, d in enumerate(replay.decisions):
        x = d.t_offset_s / scale
        action = d.action
        color = ACTION_COLORS.get(action, INK)
        dlabel = f"decision: {action}" if action not in seen else None
        seen.add(action)
        dl = ax.axvline(x, color=color, lw=1.2, alpha=0.9, label=dlabel)
        dl.set_gid(f"tb-replay-decision-{i}")
        if ax2 is not None:
            ax2.axvline(x, color=color, lw=1.0, alpha=0.6)
        if d.metric in ("p50", "p95", "p99") and d.value is not None:
            px.append(x)
            py.append(d.value)
    if px:
        sc = ax.scatter(px, py, marker="v", color=INK, s=28, zorder=5, label="value that triggered")
        sc.set_gid("tb-replay-decision-values")


def _error_panel(ax2: Any, tmin: np.ndarray, err: np.ndarray, rules: Sequence[Threshold]) -> Any:
    """The window error rate (%) with its thresholds, below the latency panel."""
    (el,) = ax2.plot(tmin, err * 100, color=GREY, lw=1.3, label="window error rate")
    el.set_gid("tb-replay-error-rate")
    for i, th in enumerate(r for r in rules if r.metric == "error_rate"):
        _threshold_line(ax2, i, th, th.value * 100, f"tb-replay-error-threshold-{i}")
    ax2.set_ylabel("errors (%)")
    ax2.set_ylim(bottom=0)
    return ax2


def replay_chart(replay: ReplayReport) -> str | None:
    """Window p95/p99 over replay time with thresholds; each decision is a marked line."""
    timeline = sorted(replay.timeline, key=lambda w: w.t_offset_s)
    if len(timeline) < 2:
        return None
    span_s = timeline[-1].t_offset_s - timeline[0].t_offset_s
    scale, unit = (
        (1.0, "s") if span_s <= 300 else (60.0, "min") if span_s <= 6 * 3600 else (3600.0, "h")
    )
    tmin = np.array([w.t_offset_s / scale for w in timeline])
    err = _series(timeline, "error_rate")
    two = not bool(np.all(np.isnan(err)))
    with style("replay"):
        fig = new_figure(7.6, 4.6 if two else 3.5)
        if two:
            ax, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
        else:
            ax, ax2 = fig.add_subplot(), None
        for key, color in (("p95", P95), ("p99", P99)):
            (ln,) = ax.plot(
                tmin, _series(timeline, key), color=color, lw=1.5, label=f"window {key}"
            )
            ln.set_gid(f"tb-replay-{key}")
        rules = rule_thresholds(replay)
        for i, th in enumerate(r for r in rules if r.metric != "error_rate"):
            _threshold_line(ax, i, th, th.value, f"tb-replay-threshold-{i}")
        _decision_lines(ax, ax2, replay, scale)
        ax.yaxis.set_major_formatter(FuncFormatter(_ms_tick))
        ax.set_ylabel("window latency (ms)")
        ax.set_ylim(bottom=0)
        ax.set_title("Replay: rolling-window percentiles and controller decisions")
        bottom = ax if ax2 is None else _error_panel(ax2, tmin, err, rules)
        bottom.set_xlabel(f"time since the log's first request ({unit})")
        handles, labels = ax.get_legend_handles_labels()
        if ax2 is not None:
            h, lab = ax2.get_legend_handles_labels()
            handles, labels = handles + h, labels + lab
        # Below the plot: the decision lines would hide behind a legend drawn inside.
        fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=7.5)
        return to_svg(fig)
