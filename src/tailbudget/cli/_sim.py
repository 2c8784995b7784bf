"""Options shared by `simulate` and `capacity`, and how both write their report."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tailbudget.cli._common import UNIT as UNIT_OPTION
from tailbudget.cli._common import emit

if TYPE_CHECKING:
    from tailbudget.sim.capacity import CapacityReport
    from tailbudget.sim.run import SimReport


class SimFormat(StrEnum):
    """Output formats of `simulate` and `capacity`."""

    md = "md"
    json = "json"
    html = "html"


def emit_report(rep: SimReport | CapacityReport, format: SimFormat, output: Path | None) -> None:
    """Write a simulation or capacity report in `format` (renderers imported on demand)."""
    render = {SimFormat.json: rep.to_json, SimFormat.html: rep.to_html}
    emit(render.get(format, rep.to_markdown)(), output)


LOGS = typer.Argument(
    ..., metavar="LOG...", help="Log(s) of the service; several = one model (a load sweep)."
)
BUDGET = typer.Option(None, "--budget", "-b", help="Budget file (objectives and policy).")
SLO = typer.Option(None, "--slo", help="Objectives, e.g. p95=2800,ttft.p95=500.")
EVENTS = typer.Option(None, "--events", help="CSV of scale-up/deploy times (cold windows).")
COLD_MIN = typer.Option(None, "--cold-window-min", help="Minutes a new replica runs cold.")
COLD = typer.Option(None, "--cold-factor", help="Work multiplier on a cold replica.")
DELAY = typer.Option(None, "--provision-delay", help="Time a new replica takes (e.g. 45s).")
CONC = typer.Option(None, "--concurrency", help="Requests one replica serves at once.")
UNIT = UNIT_OPTION
HITS = typer.Option(
    None,
    "--prefix-hit-rate",
    help="Share of prompt tokens served from the prefix cache (LLM model; default: fitted).",
)
CACHE_BLOCKS = typer.Option(
    None,
    "--prefix-cache-blocks",
    help="KV-cache blocks (512 tokens) per replica's prefix cache, for a trace's block "
    "hashes (default 2048, or more if the logs held more at once).",
)
SEED = typer.Option(0, "--seed", help="Random seed (same seed, same result).")
SAVE_MODEL = typer.Option(
    None, "--save-model", help="Also write the fitted model here (for serve --model)."
)
MAX_EVENTS = typer.Option(
    None,
    "--max-events",
    help="Refuse a run implying more simulated events than this (default 4,000,000 a run).",
)
CLASS_BY = typer.Option(
    None,
    "--class-by",
    help="Log column holding each request's class (default: the budget's classes.by).",
)
CLASS_MIX = typer.Option(
    None,
    "--class-mix",
    help="Share of arrivals per class, e.g. premium=0.2,batch=0.8 (default: the log's mix).",
)
