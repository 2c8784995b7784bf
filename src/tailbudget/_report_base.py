"""The one base of every report (plan, audit, rebudget, replay, simulate, capacity).

A report is a typed record; this base gives each the same ways out: `.to_json()` (the
CLI's `--format json`, strict RFC 8259 through `tailbudget._json`), `.to_markdown()`,
`.to_html()` (the self-contained page `--format html` writes), and Jupyter's
`_repr_html_` / `_repr_markdown_`. The renderers live in `tailbudget.report`, which
imports the layers these records live in, so no record imports its renderer: the
`to_*` methods ask `rendered(record, fmt)`, which calls the registry
(`tailbudget.report.registry.render`) through a hook the package root sets. The root
runs before any submodule (Python imports parents first), so the hook is always set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tailbudget._json import dumps

__all__ = ["ReportBase", "rendered", "use_renderer"]

Renderer = Callable[[object, str], str]
_renderer: Renderer | None = None


def use_renderer(renderer: Renderer) -> None:
    """Install the registry's `render(record, fmt)` (the package root does, at import)."""
    global _renderer
    _renderer = renderer


def rendered(record: object, fmt: str) -> str:
    """`record` as `fmt` (text, md or html), by the registry of `tailbudget.report`."""
    if _renderer is None:
        raise NotImplementedError(f"{type(record).__name__}: no renderer registry installed")
    return _renderer(record, fmt)


class ReportBase:
    """Mixin for a report record: subclasses say how they serialise and render."""

    __slots__ = ()

    def json_data(self) -> Any:
        """The JSON contract as plain values (dicts, lists, numbers, strings, None)."""
        dump = getattr(self, "model_dump", None)
        if callable(dump):
            return dump(mode="json")
        raise NotImplementedError(f"{type(self).__name__} does not say how it serialises")

    def to_json(self) -> str:
        """The `--format json` document: strict JSON (`null`, never NaN, and the notes say
        which figures are null and why), indented, newline-terminated."""

        return dumps(self.json_data(), explain=True)

    def to_markdown(self) -> str:
        """The report as Markdown (`--format md`)."""
        return rendered(self, "md")

    def to_html(self) -> str:
        """The report as one self-contained HTML page (no external assets)."""
        return rendered(self, "html")

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_markdown_(self) -> str:
        return self.to_markdown()
