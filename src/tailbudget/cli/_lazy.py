"""A command group whose commands are built only when run or asked for their own help.

Typer builds every parameter of every command when it builds a group (with pydantic
adapters since typer 0.2x), and importing a command's module used to load the engines;
`tailbudget --help` then paid for all of it. Here the top-level help reads each command's
one-line summary from its function's docstring, and a command is built on first use.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from importlib import import_module
from typing import Any, ClassVar

import typer
from typer.core import TyperGroup

__all__ = ["LazyGroup"]


def _function(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)


def _build(name: str, target: str) -> Any:
    one = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    one.command(name)(_function(target))
    return typer.main.get_command(one)


class _Commands(MutableMapping[str, Any]):
    """The group's commands: those built already, and the rest built on first lookup."""

    def __init__(self, built: MutableMapping[str, Any], lazy: dict[str, str]) -> None:
        self._built = dict(built)
        self._lazy = lazy

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in self._lazy:
                raise KeyError(name)
            self._built[name] = _build(name, self._lazy[name])
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self._built.pop(name, None)
        self._lazy.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        yield from dict.fromkeys([*self._lazy, *self._built])

    def __len__(self) -> int:
        return len(set(self._lazy) | set(self._built))

    def summary(self, name: str) -> str:
        """The command's one-line help, without building it when it is not built yet."""
        if name in self._built:
            return str(self._built[name].get_short_help_str(limit=300))
        doc = (_function(self._lazy[name]).__doc__ or "").strip()
        return doc.split("\n\n", 1)[0].replace("\n", " ")


class LazyGroup(TyperGroup):
    """A TyperGroup adding the commands of `lazy` ({name: "module:function"})."""

    lazy: ClassVar[dict[str, str]] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _Commands(self.commands, dict(self.lazy))

    def get_help_option(self, ctx: Any) -> Any:
        """The group's `--help`, False when not given: typer coerces a flag left unset (None)
        through a pydantic adapter, which put pydantic's import on every `CMD --help`."""
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command name, without building any."""
        return list(self.commands)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list of the group's help, from the summaries."""
        commands = self.commands
        assert isinstance(commands, _Commands)
        rows = [(name, commands.summary(name)) for name in commands]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
