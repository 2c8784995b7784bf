"""The `tailbudget` command line: a thin layer over the library.

Exit codes: 0 ok, 1 budget/SLO not met where asked to gate, 2 bad input.
"""

from __future__ import annotations

import typer

from tailbudget.cli._common import OneLineErrors
from tailbudget.cli.audit import audit_command
from tailbudget.cli.demo import demo_command
from tailbudget.cli.export import export_command
from tailbudget.cli.import_ import import_command
from tailbudget.cli.init import init_command
from tailbudget.cli.plan import plan_command
from tailbudget.cli.rebudget import rebudget_command
from tailbudget.cli.replay import replay_command
from tailbudget.cli.serve import serve_command

app = typer.Typer(
    name="tailbudget",
    help="Latency budgets for AI/ML inference: plan, measure, audit the tail, act on it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=OneLineErrors,
)
app.command("init")(init_command)
app.command("plan")(plan_command)
app.command("rebudget")(rebudget_command)
app.command("audit")(audit_command)
app.command("demo")(demo_command)
app.command("replay")(replay_command)
app.command("export")(export_command)
app.command("import")(import_command)
app.command("serve")(serve_command)


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "main"]
