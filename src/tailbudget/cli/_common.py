"""Shared CLI plumbing: one-line errors with exit 2, output to stdout or a file."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import typer

from tailbudget.errors import TailbudgetError

P = ParamSpec("P")
R = TypeVar("R")

EXIT_OK = 0
EXIT_GATE = 1
EXIT_BAD_INPUT = 2


def fail(message: str) -> typer.Exit:
    """Print a one-line error on stderr and return the exit-2 exception to raise."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def clean_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn TailbudgetError into a one-line message and exit 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except TailbudgetError as exc:
            raise fail(str(exc)) from None

    return wrapper


def emit(text: str, output: Path | None) -> None:
    """Write `text` to `output`, or to stdout when no file is given."""
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise TailbudgetError(f"{output}: cannot write output ({exc.strerror})") from None
