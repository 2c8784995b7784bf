"""The one base of every report (plan, audit, rebudget, replay, simulate, capacity).

A report is a typed record; this base gives each the same ways out: `.to_json()` (the
CLI's `--format json`, strict RFC 8259 through `tailbudget._json`), `.to_markdown()`,
`.to_html()` (the self-contained page `--format html` writes), and Jupyter's
`_repr_html_` / `_repr_markdown_`. The renderers live in `tailbudget.report`, which
imports the layers these records live in: each subclass imports its renderer inside the
method, so the layers stay one-way and `import tailbudget` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReportBase"]


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
        from tailbudget._json import dumps

        return dumps(self.json_data(), explain=True)

    def to_markdown(self) -> str:
        """The report as Markdown (`--format md`)."""
        raise NotImplementedError(f"{type(self).__name__} has no Markdown renderer")

    def to_html(self) -> str:
        """The report as one self-contained HTML page (no external assets)."""
        raise NotImplementedError(f"{type(self).__name__} has no HTML renderer")

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_markdown_(self) -> str:
        return self.to_markdown()
