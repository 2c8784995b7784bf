"""Read a rendered HTML report back: sections, ids, tables, and each chart's SVG as XML."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from html.parser import HTMLParser

SVG_NS = "{http://www.w3.org/2000/svg}"


@dataclass
class Page:
    """What the tests look at in a rendered page."""

    sections: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    urls: list[tuple[str, str, str]] = field(default_factory=list)  # (tag, attr, value)
    tags: set[str] = field(default_factory=set)
    na_notes: list[str] = field(default_factory=list)
    tables: list[list[list[str]]] = field(default_factory=list)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._na: list[str] | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.page.tags.add(tag)
        if a.get("id"):
            self.page.ids.append(str(a["id"]))
        if tag == "section":
            self.page.sections.append(str(a.get("id")))
        for k in ("src", "href", "xlink:href", "action", "poster", "data"):
            if a.get(k):
                self.page.urls.append((tag, k, str(a[k])))
        if tag == "p" and "na" in (a.get("class") or "").split():
            self._na = []
        if tag == "table":
            self.page.tables.append([])
        if tag == "tr":
            self._row = []
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "p" and self._na is not None:
            self.page.na_notes.append("".join(self._na))
            self._na = None
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        if tag == "tr" and self._row is not None:
            self.page.tables[-1].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._na is not None:
            self._na.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> Page:
    """Parse a rendered report."""
    p = _Parser()
    p.feed(html)
    return p.page


def figures(html: str) -> dict[str, tuple[str, ET.Element]]:
    """chart id -> (takeaway text, parsed <svg> root) for every chart on the page."""
    out = {}
    for m in re.finditer(
        r'<figure class="chart"[^>]*data-chart="([^"]+)"[^>]*>(.*?)</figure>', html, re.S
    ):
        body = m.group(2)
        take = re.search(r'<p class="takeaway">(.*?)</p>', body, re.S)
        svg = body[body.index("<svg") : body.rindex("</svg>") + 6]
        out[m.group(1)] = (take.group(1) if take else "", ET.fromstring(svg))
    return out


def by_id(root: ET.Element, prefix: str) -> list[ET.Element]:
    """Elements whose id starts with `prefix`."""
    return [e for e in root.iter() if (e.get("id") or "").startswith(prefix)]


def drawn(el: ET.Element) -> bool:
    """True when an element holds something visible (a path with a `d`, or a `use`)."""
    return any(
        (e.tag == f"{SVG_NS}path" and len(e.get("d", "")) > 4) or e.tag == f"{SVG_NS}use"
        for e in el.iter()
    )


def path_points(el: ET.Element) -> int:
    """Number of vertices in the first path under `el` (M/L commands)."""
    for e in el.iter(f"{SVG_NS}path"):
        return len(re.findall(r"[ML]", e.get("d", "")))
    return 0
