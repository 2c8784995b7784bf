"""A report that has only a text form (plan, rebudget) as one self-contained page."""

from __future__ import annotations

from tailbudget.report.html import page

__all__ = ["text_html"]


def text_html(title: str, subtitle: str, text: str) -> str:
    """The text (Markdown as written) in a page with the other reports' style."""
    return page.document(title, subtitle, [("report", title, f"<pre>{page.esc(text)}</pre>")])
