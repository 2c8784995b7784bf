"""Matplotlib figures to deterministic inline SVG.

Figures are built with `matplotlib.figure.Figure` directly (never pyplot), so no
GUI backend is touched and no global figure state leaks between reports. Text is
kept as SVG text (`svg.fonttype: none`): it stays selectable and small, and the
browser draws it with a local font, so nothing is fetched. `svg.hashsalt` and a
null Date make the same data give byte-identical SVG.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from tailbudget import _fmt as fmt
from tailbudget.report.html.ticks import tidy

# Okabe-Ito: readable for colour-blind readers and in greyscale print.
P50 = "#56B4E9"
P95 = "#E69F00"
P99 = "#D55E00"
BLUE = "#0072B2"
GREEN = "#009E73"
PURPLE = "#CC79A7"
GREY = "#7f7f7f"
INK = "#1d2330"
SERIES = (BLUE, P99, GREEN, PURPLE, P95, GREY)
"""Colours of series that stand for no percentile (one per policy, cohort...), in order."""
PCT_COLORS = {"p50": P50, "p95": P95, "p99": P99}

_RC: dict[str, Any] = {
    "font.size": 9.5,
    "font.family": "sans-serif",
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e3e6ec",
    "grid.linewidth": 0.7,
    "legend.fontsize": 8.5,
    "legend.frameon": False,
    "svg.fonttype": "none",
}

_SERIES = re.compile(r'<g id="(tb-[^"]+)"')
_ID = re.compile(r' id="([^"]+)"')
_REF = re.compile(r'(id="|#)([^"\s)]+)')
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


def slo_line(ax: Any, slo_ms: float, data_max: float, gid: str) -> None:
    """A dashed p99 SLO line; far above the data it becomes a note, so the data keeps the room."""
    label = f"p99 SLO {fmt.ms(slo_ms)} ms"
    if data_max > 0 and slo_ms > 2.5 * data_max:
        note = ax.annotate(
            f"{label}: far above this chart",
            (1.0, 1.0),
            xycoords="axes fraction",
            xytext=(-4, -4),
            textcoords="offset points",
            ha="right",
            va="top",
            fontsize=8,
            color=P99,
        )
        note.set_gid(f"{gid}-above")
        return
    line = ax.axhline(slo_ms, color=P99, ls="--", lw=1.2, label=label)
    line.set_gid(gid)


@contextmanager
def style(key: str) -> Iterator[None]:
    """rcParams for one chart; `key` salts the SVG ids so charts never share one."""
    rc: Any = {**_RC, "svg.hashsalt": f"tailbudget-{key}", "svg.id": f"svg-{key}"}
    with matplotlib.rc_context(rc):
        yield


def new_figure(width: float = 7.6, height: float = 3.5) -> Figure:
    """A figure with a white background, sized for a laptop-width column."""
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def to_svg(fig: Figure) -> str:
    """Serialize inside `style()`: the inline <svg> element, series groups tagged by class."""
    tidy(fig)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    svg = text[text.index("<svg") :]
    # Matplotlib writes fixed pt sizes; the viewBox alone lets CSS scale the chart.
    svg = re.sub(r'^<svg([^>]*?) width="[^"]*" height="[^"]*"', r"<svg\1", svg, count=1)
    title = next((a.get_title() for a in fig.axes if a.get_title()), "chart")
    svg = svg.replace("<svg ", f'<svg role="img" aria-label="{html.escape(title)}" ', 1)
    svg = _METADATA.sub("", svg)  # RDF boilerplate: namespace URLs a reader might mistake for links
    # Matplotlib numbers its ids per figure (figure_1, patch_1, ...); several charts on one
    # page would repeat them, so prefix every id but ours with this chart's root id.
    root = str(matplotlib.rcParams["svg.id"])
    rename = {i: f"{root}-{i}" for i in _ID.findall(svg) if i != root and not i.startswith("tb-")}
    svg = _REF.sub(lambda m: m.group(1) + rename.get(m.group(2), m.group(2)), svg)
    return _SERIES.sub(r'<g id="\1" class="tb-series"', svg)
