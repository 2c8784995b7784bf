"""Every command, and the app itself, has help."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from tailbudget.cli import COMMANDS, app

runner = CliRunner()


def test_app_help_lists_every_command():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    group = typer.main.get_command(app)
    assert list(group.list_commands(None)) == list(COMMANDS)  # type: ignore[attr-defined]
    for name in COMMANDS:
        assert name in result.output


@pytest.mark.parametrize("name", list(COMMANDS))
def test_command_has_help(name):
    command = typer.main.get_command(app).get_command(None, name)  # type: ignore[attr-defined]
    assert (command.help or "").strip(), f"{name} has no help text"
    result = runner.invoke(app, [name, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output
