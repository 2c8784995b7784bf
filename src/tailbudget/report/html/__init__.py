"""Self-contained HTML reports with inline SVG charts (matplotlib), openable offline."""

from __future__ import annotations

from tailbudget.report.html.audit import render_audit_html
from tailbudget.report.html.replay import render_replay_html

__all__ = ["render_audit_html", "render_replay_html"]
