"""Shared CLI plumbing: one-line errors with exit 2, output to stdout or a file.

One style for every command: bad input (a TailbudgetError, or a usage error such as
an unknown option or a bad choice) is one `error:` line on stderr and exit 2; a gate
that fails (a budget that does not fit, `--fail-on-breach`) is exit 1 and never says
`error:`; every `-o FILE` ends with `wrote FILE` on stderr.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import typer
from typer.core import TyperGroup

from tailbudget.errors import TailbudgetError

P = ParamSpec("P")
R = TypeVar("R")

EXIT_OK = 0
EXIT_GATE = 1
EXIT_BAD_INPUT = 2


class TextFormat(StrEnum):
    """Output formats of the commands that report on a budget (`plan`, `rebudget`)."""

    text = "text"
    md = "md"
    json = "json"
    html = "html"


def fail(message: str) -> typer.Exit:
    """Print a one-line error on stderr and return the exit-2 exception to raise."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


_FLOAT_RANGE_WARNINGS = ("overflow encountered", "invalid value encountered")


def clean_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn TailbudgetError into a one-line message and exit 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            with warnings.catch_warnings():
                # Latencies near the float range (1e308 ms) overflow to inf in sums and
                # powers; the report writes such a figure as null with a note saying why,
                # so NumPy's warning would only add lines to a one-line contract.
                for text in _FLOAT_RANGE_WARNINGS:
                    warnings.filterwarnings("ignore", text, RuntimeWarning)
                return fn(*args, **kwargs)
        except TailbudgetError as exc:
            raise fail(in_flags(exc)) from None

    return wrapper


_FLAGS = {"cohorts": "--cohort"}
"""Parameters whose flag is not `--` + the name with dashes (a repeatable flag is singular)."""


def flag_of(param: str) -> str:
    """The command-line flag of an API parameter: total -> --total, span_stage -> --span-stage."""
    return _FLAGS.get(param, "--" + param.replace("_", "-"))


def in_flags(exc: TailbudgetError) -> str:
    """The error in the CLI's words: the parameter it is about spelled as its flag, and
    every argument it mentions (`errors.said`) too.

    The library says `total: column 'X' not found ...`; the CLI says `--total: ...`.
    A message that does not start with its parameter gets the flag in front. A mention
    `duration='10000h'` reads `--duration 10000h`, a bare `max_events` `--max-events`.
    """
    message = str(exc)
    for name in exc.mentions:
        message = _mention_in_flags(message, name)
    if exc.param is None:
        return message
    flag, n = flag_of(exc.param), len(exc.param)
    if message.startswith(exc.param) and message[n : n + 1] in (":", " ", ""):
        return flag + message[n:]
    return f"{flag}: {message}"


def _mention_in_flags(message: str, name: str) -> str:
    flag = flag_of(name)
    valued = re.compile(
        rf"(?<![\w.-]){re.escape(name)}=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s:,;]+)"
    )
    if valued.search(message):
        return valued.sub(lambda m: f"{flag} {_value(m.group(1))}", message)
    return re.sub(rf"(?<![\w.=-]){re.escape(name)}(?![\w=-])", flag, message)


def _value(written: str) -> str:
    """A value as `repr` wrote it, as the command line gave it ('10000h' -> 10000h)."""
    try:
        return str(ast.literal_eval(written))
    except (ValueError, SyntaxError):
        return written


def writable_folder(folder: Path, flag: str) -> None:
    """Make `folder` (and its parents) or refuse in one line: a path under a file, a name
    too long for the file system, a tree the user cannot write to."""
    try:
        if folder.is_file():
            raise TailbudgetError(
                f"{flag} {folder}: is a file, not a folder; give a folder to write into"
            )
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".tailbudget-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TailbudgetError(
            f"{flag} {_shown(folder)}: cannot write there ({exc.strerror or exc}); give a "
            "folder you can write to"
        ) from None


def output_exists(output: Path, flag: str = "-o") -> bool:
    """Whether `output` exists; a path the file system refuses (a name too long, a parent
    that is a file) is one error line, not a traceback."""
    try:
        parent = output.parent
        if parent.exists() and not parent.is_dir():
            raise TailbudgetError(
                f"{flag} {_shown(output)}: {_shown(parent)} is a file, not a folder; give "
                "a path in a folder"
            )
        return output.exists()
    except OSError as exc:
        raise TailbudgetError(
            f"{flag} {_shown(output)}: not a usable path ({exc.strerror or exc}); give a "
            "shorter name or another folder"
        ) from None


def _shown(path: Path) -> str:
    """A path short enough for one line (a 4,000-character name is shown by its ends)."""
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"


def emit(text: str, output: Path | None, *, next_step: str = "") -> None:
    """Write `text` to `output` (then say `wrote FILE` on stderr), or to stdout."""
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise TailbudgetError(
            f"{_shown(output)}: cannot write output ({exc.strerror or exc}); give a shorter "
            "name or a folder you can write to"
        ) from None
    typer.echo(f"wrote {output}" + (f"; next: {next_step}" if next_step else ""), err=True)


def gate_failed(message: str) -> typer.Exit:
    """Say why a gate failed (not bad input: no `error:`) and return the exit-1 exception."""
    typer.echo(f"gate failed: {' '.join(message.split())}", err=True)
    return typer.Exit(EXIT_GATE)


def terminal_width() -> int | None:
    """The width to render for: the terminal's, or None (no wrapping) when piped."""
    return None if sys.stdout.isatty() else 10_000


def _click_exception() -> type[Exception]:
    # Typer vendors click in recent releases (typer._click); older ones use click itself.
    core = importlib.import_module("typer.core")
    module = getattr(core, "_click", None) or importlib.import_module("click")
    exc: type[Exception] = module.exceptions.ClickException
    return exc


def _one_line(exc: Any) -> str:
    message = " ".join(str(exc.format_message()).split()).replace("Value error, ", "")
    ctx = getattr(exc, "ctx", None)
    where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    return f"error: {message}{where}"


class OneLineErrors(TyperGroup):
    """The command group: usage errors become one line and exit 2, never a boxed panel."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command; print a usage error as one line on stderr and exit 2."""
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_exception() as exc:
            if not standalone_mode:
                raise
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `tailbudget`: the help
                typer.echo(exc.format_message(), err=True)  # type: ignore[attr-defined]
                sys.exit(EXIT_BAD_INPUT)
            typer.echo(_one_line(exc), err=True)
            sys.exit(getattr(exc, "exit_code", EXIT_BAD_INPUT))
        except typer.Abort:
            if not standalone_mode:
                raise
            typer.echo("aborted", err=True)
            sys.exit(EXIT_GATE)
        if standalone_mode:
            sys.exit(rv if isinstance(rv, int) else 0)
        return rv


UNIT = typer.Option(None, "--unit", help="Latency unit when the log does not say it: ms, s or us.")
"""`--unit` of every command that reads a latency log (a log in seconds read as ms would
be a 1 ms service: such logs are refused until the unit is stated)."""
