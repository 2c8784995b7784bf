"""`tailbudget demo`: build a sample RAG log, plan, audit, write reports, print a summary."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli._common import clean_errors, writable_folder
from tailbudget.errors import TailbudgetError


@clean_errors
def demo_command(
    out: Path = typer.Option(Path("tailbudget-demo"), "--out", help="Folder to write into."),
    rows: int = typer.Option(300_000, "--rows", help="Requests in the generated log."),
    seed: int = typer.Option(7, "--seed", help="Random seed of the generated log."),
) -> None:
    """Run the whole job on a generated RAG-service log, on DuckDB with nothing to start."""
    if not 1_000 <= rows <= 20_000_000:
        raise TailbudgetError(f"--rows must be between 1,000 and 20,000,000, got {rows}")
    if not 0 <= seed < 2**63:
        raise TailbudgetError(f"--seed must be an integer from 0 to 2**63 - 1, got {seed}")
    writable_folder(out, "--out")
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from rich.console import Console

    from tailbudget.demo import run_demo

    err = Console(stderr=True)
    with err.status("demo") as status:
        try:
            state = run_demo(
                out, rows=rows, seed=seed, on_step=lambda s: status.update(f"demo: {s}")
            )
        except OSError as exc:  # the folder filled up or was taken away mid-run
            raise TailbudgetError(
                f"--out {out}: cannot write the demo there ({exc.strerror or exc}); give a "
                "folder you can write to"
            ) from None
    typer.echo(f"tailbudget demo -> {out}")
    for line in state.summary:
        typer.echo(f"  {line}")
    typer.echo("  files: " + ", ".join(p.name for p in state.files))
    if "report_html" in state.extra:
        typer.echo(f"  open the HTML report: {Path(state.extra['report_html']).resolve()}")
    if "replay_html" in state.extra:
        typer.echo(f"  and the policy replay: {Path(state.extra['replay_html']).resolve()}")
