"""`tailbudget --help` and `tailbudget CMD --help` load no heavy library: the engines,
Arrow, NumPy and plotting are imported inside the commands that use them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tailbudget.cli import COMMANDS

HEAVY = ("ibis", "duckdb", "pyarrow", "numpy", "pandas", "scipy", "matplotlib", "sqlglot")
# typer itself builds a command's parameters with pydantic (typer >= 0.2x), so only the
# top-level help, which builds no command, can stay without it.
TOP_LEVEL_ONLY = ("pydantic", "yaml", "rich")

PROBE = """
import json, sys
from tailbudget.cli import app
try:
    app(sys.argv[1:], prog_name="tailbudget")
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _loaded(*args: str) -> tuple[int, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return int(result["code"] or 0), set(result["loaded"])


def test_top_level_help_loads_nothing_heavy() -> None:
    code, loaded = _loaded("--help")
    assert code == 0
    assert not loaded & {*HEAVY, *TOP_LEVEL_ONLY}, sorted(loaded & {*HEAVY, *TOP_LEVEL_ONLY})


@pytest.mark.parametrize("name", list(COMMANDS))
def test_command_help_loads_nothing_heavy(name: str) -> None:
    code, loaded = _loaded(name, "--help")
    assert code == 0
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_export_help_names_the_real_targets_and_defaults() -> None:
    from tailbudget.cli import export as cli_export
    from tailbudget.export import TARGETS, ExportOptions

    assert tuple(TARGETS) == cli_export.TARGET_NAMES
    assert ExportOptions().prometheus_url == cli_export.PROMETHEUS_URL
    assert ExportOptions().verdict_url == cli_export.VERDICT_URL
