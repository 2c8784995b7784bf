"""The renderer registry: `render(record, fmt)` for every report record.

Records (budget.plan.Plan, audit.report.AuditReport, budgeting.proposal.Rebudget,
control.replay_record.ReplayReport, sim.run.SimReport, sim.capacity.CapacityReport) never
import their renderers: `ReportBase.to_text / to_markdown / to_html` come here, through
the hook the package root sets (`tailbudget._report_base.use_renderer`), so the layers
run one way (report/ imports the records, never the reverse).

`render` is a `functools.singledispatch` on the record's type. Its entries are filled on
first use from `RENDERERS`, keyed by the record class's import path, so that rendering a
plan does not import the simulator and the audit only to register their renderers, and
`--format md` never imports the HTML renderers (matplotlib).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import import_module
from typing import Literal

__all__ = ["RENDERERS", "Format", "render"]

Format = Literal["text", "md", "html"]

RENDERERS: dict[str, dict[str, str]] = {
    "tailbudget.budget.plan.Plan": {
        "text": "tailbudget.report.plan:plan_text",
        "md": "tailbudget.report.plan:plan_markdown",
        "html": "tailbudget.report.html.plan:render_plan_html",
    },
    "tailbudget.audit.report.AuditReport": {
        "md": "tailbudget.report.audit_md:audit_markdown",
        "html": "tailbudget.report.html.audit:render_audit_html",
    },
    "tailbudget.budgeting.proposal.Rebudget": {
        "text": "tailbudget.report.rebudget:rebudget_text",
        "md": "tailbudget.report.rebudget:rebudget_markdown",
        "html": "tailbudget.report.html.plan:render_rebudget_html",
    },
    "tailbudget.control.replay_record.ReplayReport": {
        "text": "tailbudget.report.replay_text:replay_text",
        "md": "tailbudget.report.replay_text:replay_markdown",
        "html": "tailbudget.report.html.replay:render_replay_html",
    },
    "tailbudget.sim.run.SimReport": {
        "md": "tailbudget.report.simulate_md:simulate_markdown",
        "html": "tailbudget.report.html.simulate:render_simulate_html",
    },
    "tailbudget.sim.capacity.CapacityReport": {
        "md": "tailbudget.report.simulate_md:capacity_markdown",
        "html": "tailbudget.report.html.simulate:render_capacity_html",
    },
}
"""Per record class (its import path), per format: the renderer, as `module:function`."""

_NAMES = {"text": "text", "md": "Markdown", "html": "HTML"}


@functools.singledispatch
def render(record: object, fmt: str) -> str:
    """The record rendered as `fmt` (text, md or html).

    This body runs only for a type not registered yet: it registers the renderers
    `RENDERERS` names for the class (or the nearest base listed) and dispatches again."""
    for cls in type(record).__mro__:
        table = RENDERERS.get(f"{cls.__module__}.{cls.__qualname__}")
        if table is not None:
            render.register(cls, _by_format(table))
            return render(record, fmt)
    raise NotImplementedError(f"{type(record).__name__} has no {_NAMES.get(fmt, fmt)} renderer")


def _by_format(table: dict[str, str]) -> Callable[[object, str], str]:
    def by_format(record: object, fmt: str) -> str:
        where = table.get(fmt)
        if where is None:
            name = _NAMES.get(fmt, fmt)
            raise NotImplementedError(f"{type(record).__name__} has no {name} renderer")
        module, _, function = where.partition(":")
        # Imported on first use, by name: the HTML renderers load matplotlib, which a
        # Markdown or text report never needs (start-up time of each command).
        renderer: Callable[[object], str] = getattr(import_module(module), function)
        return renderer(record)

    return by_format
