"""The `tailbudget` command line: a thin layer over the library.

Exit codes: 0 ok, 1 budget/SLO not met where asked to gate, 2 bad input.

Commands are registered by module path and built on first use (cli/_lazy.py): a command
module imports only typer and the standard library at the top, and its heavy libraries
(ibis, DuckDB, pyarrow, NumPy, matplotlib, ...) inside the command function, so that
`tailbudget --help` and `tailbudget CMD --help` answer at once (tests/cli/test_startup.py).
"""

from __future__ import annotations

import typer

from tailbudget._version import __version__
from tailbudget.cli._common import OneLineErrors
from tailbudget.cli._lazy import LazyGroup

COMMANDS = {
    "init": "tailbudget.cli.init:init_command",
    "plan": "tailbudget.cli.plan:plan_command",
    "rebudget": "tailbudget.cli.rebudget:rebudget_command",
    "audit": "tailbudget.cli.audit:audit_command",
    "demo": "tailbudget.cli.demo:demo_command",
    "replay": "tailbudget.cli.replay:replay_command",
    "export": "tailbudget.cli.export:export_command",
    "import": "tailbudget.cli.import_:import_command",
    "serve": "tailbudget.cli.serve:serve_command",
    "simulate": "tailbudget.cli.simulate:simulate_command",
    "capacity": "tailbudget.cli.capacity:capacity_command",
}
"""Every command: name -> "module:function"."""


class _Group(OneLineErrors, LazyGroup):
    lazy = COMMANDS


app = typer.Typer(
    name="tailbudget",
    help="Latency budgets for AI/ML inference: plan, measure, audit the tail, act on it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help text: Rich's help panels cost more to import than the whole CLI.
    rich_markup_mode=None,
    cls=_Group,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tailbudget {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version, help="Print the version and exit."
    ),
) -> None:
    """Latency budgets for AI/ML inference: plan, measure, audit the tail, act on it."""


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["COMMANDS", "app", "main"]
