"""`tailbudget --help` and `tailbudget CMD --help` load no heavy library: the engines,
Arrow, NumPy and plotting are imported inside the commands that use them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tailbudget.cli import COMMANDS

HEAVY = ("ibis", "duckdb", "pyarrow", "numpy", "pandas", "scipy", "matplotlib", "sqlglot")
# typer coerces values through pydantic, but `--help` coerces none (cli/_lazy.py keeps the
# group's unset `--help` from doing so): no help needs pydantic, YAML or Rich either.
TOP_LEVEL_ONLY = ("pydantic", "yaml", "rich")
# What a command's module may import at the top: typer, the standard library and these.
# The base layer's standard-library-only modules: the version, the formatter, the JSON
# writer and the report base (whose renderer hook the package root sets).
LIGHT = {
    "tailbudget",
    "tailbudget.errors",
    "tailbudget._units",
    "tailbudget._version",
    "tailbudget._fmt",
    "tailbudget._report_base",
    "tailbudget._json",
}

PROBE = """
import json, sys
from tailbudget.cli import app
try:
    app(sys.argv[1:], prog_name="tailbudget")
except SystemExit as exc:
    code = exc.code
ours = sorted(m for m in sys.modules if m.startswith("tailbudget"))
loaded = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"code": code, "loaded": loaded, "ours": ours}))
"""


def _probe(*args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _loaded(*args: str) -> tuple[int, set[str]]:
    result = _probe(*args)
    return int(result["code"] or 0), set(result["loaded"])  # type: ignore[call-overload]


def test_top_level_help_loads_nothing_heavy() -> None:
    code, loaded = _loaded("--help")
    assert code == 0
    assert not loaded & {*HEAVY, *TOP_LEVEL_ONLY}, sorted(loaded & {*HEAVY, *TOP_LEVEL_ONLY})


@pytest.mark.parametrize("name", list(COMMANDS))
def test_command_help_loads_nothing_heavy(name: str) -> None:
    code, loaded = _loaded(name, "--help")
    assert code == 0
    assert not loaded & {*HEAVY, *TOP_LEVEL_ONLY}, sorted(loaded & {*HEAVY, *TOP_LEVEL_ONLY})


@pytest.mark.parametrize("args", [*([name, "--help"] for name in COMMANDS), ["--version"]])
def test_help_loads_only_the_cli_of_tailbudget(args: list[str]) -> None:
    # A command module imports its library inside the command body, never at the top.
    result = _probe(*args)
    ours = {m for m in result["ours"] if not m.startswith("tailbudget.cli")}  # type: ignore[attr-defined]
    assert result["code"] in (0, None) and ours <= LIGHT, sorted(ours - LIGHT)


def test_version_prints_the_package_version() -> None:
    import tailbudget

    proc = subprocess.run(
        [sys.executable, "-m", "tailbudget", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"tailbudget {tailbudget.__version__}"


def test_export_help_names_the_real_targets_and_defaults() -> None:
    from tailbudget.cli import export as cli_export
    from tailbudget.export import TARGETS, ExportOptions

    assert tuple(TARGETS) == cli_export.TARGET_NAMES
    assert ExportOptions().prometheus_url == cli_export.PROMETHEUS_URL
    assert ExportOptions().verdict_url == cli_export.VERDICT_URL
