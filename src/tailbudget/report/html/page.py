"""The self-contained HTML document: inline CSS, a tiny sortable-table script, print styles.

Nothing here fetches anything: no CDN, no web fonts, no remote images. A
Content-Security-Policy meta tag makes the browser refuse any request a future
edit might sneak in.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeGuard, TypeVar

from tailbudget import _fmt as fmt

_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; font-src 'none'; connect-src 'none'"
)

_CSS = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#d9dee7; --bg:#fff; --accent:#0b5cad;
  --pass:#1a7f37; --breach:#c62828; --warn:#9a6700; --soft:#f5f7fa; }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans",
  sans-serif; color:var(--fg); background:var(--bg); }
main { max-width: 1040px; margin: 0 auto; padding: 24px 28px 64px; }
header h1 { font-size: 1.6rem; margin: 0 0 4px; }
header p { margin: 0; color: var(--muted); }
nav { margin: 16px 0 8px; display:flex; flex-wrap:wrap; gap:6px 14px; font-size:.9rem; }
nav a { color: var(--accent); text-decoration: none; }
section { border-top: 1px solid var(--line); padding-top: 10px; margin-top: 26px; }
h2 { font-size: 1.25rem; margin: 6px 0 10px; }
h3 { font-size: 1.02rem; margin: 16px 0 6px; }
figure { margin: 14px 0 22px; padding: 0; break-inside: avoid; }
figure .takeaway { font-weight: 600; margin: 0 0 4px; }
figure svg { display:block; width:100%; max-width: 900px; height:auto; }
figcaption { color: var(--muted); font-size: .85rem; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 14px; font-size: .9rem; }
th, td { padding: 5px 9px; border-bottom: 1px solid var(--line); text-align: left;
  vertical-align: top; }
td.wide { min-width: 12em; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num { white-space: nowrap; }
thead th { background: var(--soft); position: sticky; top: 0; }
table.sortable thead th { cursor: pointer; user-select: none; }
table.sortable thead th::after { content: " \\2195"; color: #aab; font-size: .8em; }
table.sortable thead th[aria-sort="ascending"]::after { content: " \\25B2"; color: var(--fg); }
table.sortable thead th[aria-sort="descending"]::after { content: " \\25BC"; color: var(--fg); }
.table-wrap { overflow-x: auto; }
.pass { color: var(--pass); font-weight: 600; }
.breach { color: var(--breach); font-weight: 600; }
.flag { color: var(--warn); font-weight: 600; }
.na { color: var(--muted); font-style: italic; background: var(--soft); padding: 6px 10px;
  border-left: 3px solid var(--line); }
.cards { display:flex; flex-wrap: wrap; gap: 10px; margin: 8px 0 12px; }
.card { border:1px solid var(--line); border-radius:6px; padding: 8px 12px; min-width: 130px; }
.card .k { color: var(--muted); font-size: .8rem; }
.card .v { font-size: 1.2rem; font-weight: 600; font-variant-numeric: tabular-nums; }
.verdict { font-size: 1.08em; margin: 4px 0 10px; }
.verdict.bad { color: var(--bad, #b3261e); }
.rec { border-left: 4px solid var(--accent); background: var(--soft); padding: 10px 14px; }
dl.kv { display:grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 6px 0; }
dl.kv dt { color: var(--muted); }
dl.kv dd { margin: 0; overflow-wrap: anywhere; }
@media (max-width: 700px) { main { padding: 12px; } dl.kv { grid-template-columns: 1fr; } }
@media print {
  body { font-size: 11pt; }
  main { max-width: none; padding: 0; }
  nav { display: none; }
  section { break-inside: auto; }
  figure, table, .rec { break-inside: avoid; }
  thead th { position: static; }
  table.sortable thead th::after { content: ""; }
  a { color: inherit; text-decoration: none; }
}
"""

# Sort a table by the clicked header: numbers by data-v (or parsed text), else text.
_JS = """
(function () {
  function key(cell) {
    var v = cell.getAttribute('data-v');
    if (v === null) { v = cell.textContent.trim(); }
    var n = parseFloat(v);
    return isNaN(n) || !/^-?[\\d.]/.test(v) ? {t: 1, s: v.toLowerCase()} : {t: 0, n: n};
  }
  function cmp(a, b) {
    if (a.t !== b.t) { return a.t - b.t; }
    return a.t === 0 ? a.n - b.n : (a.s < b.s ? -1 : a.s > b.s ? 1 : 0);
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, col) {
      th.setAttribute('tabindex', '0');
      function sort() {
        var asc = th.getAttribute('aria-sort') !== 'ascending';
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (r1, r2) {
          var d = cmp(key(r1.cells[col]), key(r2.cells[col]));
          return asc ? d : -d;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener('click', sort);
      th.addEventListener('keydown', function (e) { if (e.key === 'Enter') { sort(); } });
    });
  });
})();
"""


def esc(value: object) -> str:
    """HTML-escape any value's string form."""
    return html.escape(str(value), quote=True)


def is_num(value: object) -> TypeGuard[int | float]:
    """True for a finite int or float (bool excluded)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def fmt_ms(value: object) -> str:
    """Milliseconds with thousands separators; '-' when missing (the reports' formatter)."""
    return fmt.ms(value)


def fmt_pct(value: object, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage; '-' when missing (the reports' formatter)."""
    return fmt.share(value, digits)


@dataclass(frozen=True)
class Cell:
    """A table cell: display text (escaped on output), sort value, CSS class."""

    text: str
    sort: float | str | None = None
    css: str = ""
    raw_html: bool = False


def cell(value: object, kind: str = "text") -> Cell:
    """Build a cell from a value: kind is text, long (prose), ms, pct, int, r2 or num."""
    if kind == "ms":
        return Cell(fmt_ms(value), float(value) if is_num(value) else None, "num")
    if kind == "pct":
        return Cell(fmt.share(value), float(value) if is_num(value) else None, "num")
    if kind == "int":
        return Cell(fmt.count(value), value if is_num(value) else None, "num")
    if kind == "r2":
        return Cell(fmt.r2(value), float(value) if is_num(value) else None, "num")
    if kind == "num":
        return Cell(fmt.number(value), float(value) if is_num(value) else None, "num")
    if kind == "long":
        return Cell("-" if value is None else str(value), None, "wide")
    return Cell("-" if value is None else str(value))


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Cell]], *, numeric: Sequence[int] = ()
) -> str:
    """A sortable table (click a header to sort; numbers sort numerically)."""
    head = "".join(
        f'<th scope="col"{" class=num" if i in numeric else ""}>{esc(h)}</th>'
        for i, h in enumerate(headers)
    )
    body: list[str] = []
    for row in rows:
        tds = []
        for c in row:
            attrs = f' class="{c.css}"' if c.css else ""
            if c.sort is not None:
                attrs += f' data-v="{esc(c.sort)}"'
            tds.append(f"<td{attrs}>{c.text if c.raw_html else esc(c.text)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (
        '<div class="table-wrap"><table class="sortable"><thead><tr>'
        + head
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table></div>"
    )


def not_available(reason: str) -> str:
    """The short note shown in place of a section or chart that has no data."""
    return f'<p class="na">not available: {esc(reason)}</p>'


def figure(chart_id: str, takeaway: str, svg: str | None, caption: str = "") -> str:
    """A chart with its one-line takeaway above it."""
    if svg is None:
        return not_available(f"{caption or chart_id}: no data to draw")
    label = f' aria-label="{esc(caption)}"' if caption else ""
    return (
        f'<figure class="chart" id="fig-{esc(chart_id)}" data-chart="{esc(chart_id)}"{label}>'
        f'<p class="takeaway">{esc(takeaway)}</p>{svg}</figure>'
    )


def section(sid: str, title: str, body: str) -> str:
    """One report section with an anchor id."""
    return f'<section id="{esc(sid)}"><h2>{esc(title)}</h2>{body}</section>'


def kv(pairs: Iterable[tuple[str, str]]) -> str:
    """A definition list of key/value pairs (values escaped)."""
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs)
    return f'<dl class="kv">{items}</dl>'


def cards(pairs: Iterable[tuple[str, str, str]]) -> str:
    """Headline figures as small cards: (label, value, css class)."""
    out = "".join(
        f'<div class="card"><div class="k">{esc(k)}</div>'
        f'<div class="v{" " + c if c else ""}">{esc(v)}</div></div>'
        for k, v, c in pairs
    )
    return f'<div class="cards">{out}</div>'


Report = TypeVar("Report")


def render_sections(
    data: Report,
    sections: Iterable[tuple[str, str, Callable[[Report], str]]],
) -> list[tuple[str, str, str]]:
    """Run each (id, title, render) on `data`, for `document`.

    A malformed section must not cost the reader the rest of the report: its
    renderer's error becomes a "not available" note in its place.
    """
    out = []
    for sid, title, fn in sections:
        try:
            body = fn(data)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            body = not_available(f"this section's data is malformed ({type(exc).__name__}: {exc})")
        out.append((sid, title, body))
    return out


def document(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole page: sections are (id, title, body html), in reading order."""
    nav = "".join(f'<a href="#{esc(sid)}">{esc(t)}</a>' for sid, t, _ in sections)
    body = "".join(section(sid, t, b) for sid, t, b in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>"
        f"<body><main><header><h1>{esc(title)}</h1><p>{esc(subtitle)}</p></header>"
        f"<nav>{nav}</nav>{body}</main><script>{_JS}</script></body></html>\n"
    )
