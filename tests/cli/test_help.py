"""Every command, and the app itself, has help."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from tailbudget.cli import app

runner = CliRunner()
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_app_help_lists_every_command():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_help(name):
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    assert (command.help or "").strip(), f"{name} has no help text"
    result = runner.invoke(app, [name, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output
