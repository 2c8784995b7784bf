"""One CLI style: one-line usage errors, one meaning per short flag, `wrote FILE`, gates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tailbudget.cli import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
runner = CliRunner()
ROOT: Any = typer.main.get_command(app)
COMMANDS = sorted(ROOT.commands)
_BOX = set("╭╮╰╯│─┌┐└┘")


def _params(name: str) -> list[Any]:
    return [p for p in ROOT.commands[name].params if p.opts[0].startswith("-")]


def _error_line(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, (args, res.output)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, (args, res.stderr)
    assert not _BOX & set(lines[0]) and lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("name", COMMANDS)
def test_usage_errors_are_one_line_and_exit_2(name: str) -> None:
    line = _error_line([name, "--no-such-option"])
    assert "--no-such-option" in line and f"{name} --help" in line


def test_bad_choices_and_missing_arguments_are_one_line() -> None:
    assert "'xml' is not one of" in _error_line(["audit", "x.csv", "--format", "xml"])
    assert "'nope' is not one of" in _error_line(["init", "--template", "nope"])
    assert "Missing argument 'budget'" in _error_line(["plan"])
    assert "No such command" in _error_line(["frobnicate"])


def test_one_meaning_per_short_flag() -> None:
    meaning: dict[str, set[str]] = {}
    for name in COMMANDS:
        for p in _params(name):
            longs = [o for o in p.opts if o.startswith("--")]
            for short in (o for o in p.opts if not o.startswith("--")):
                meaning.setdefault(short, set()).update(longs)
    clashes = {s: m for s, m in meaning.items() if len(m) > 1}
    assert not clashes, clashes


def test_default_formats_are_the_readable_family() -> None:
    defaults = {}
    for name in COMMANDS:
        for p in _params(name):
            if "--format" in p.opts:
                defaults[name] = str(getattr(p.default, "value", p.default))
    assert defaults and set(defaults.values()) <= {"text", "md"}, defaults


def _run_to_file(tmp_path: Path, args: list[str], out: Path) -> str:
    res = runner.invoke(app, [*args, "-o", str(out)])
    assert res.exit_code in (0, 1), res.output
    assert out.is_file()
    return res.stderr


def budget_for(tmp_path: Path) -> Path:
    path = tmp_path / "one.yaml"
    path.write_text(
        "service: one\nslo: {p99: 500}\npipeline:\n  - stage: work\n    budget: {p99: 400}\n"
        "log: {stages: {work: total_ms}}\n"
    )
    return path


def test_every_output_file_is_announced(tmp_path: Path) -> None:
    rag = str(EXAMPLES / "rag.yaml")
    log = tmp_path / "log.csv"
    log.write_text("ts,total_ms\n" + "".join(f"{i},{100 + i % 7}\n" for i in range(600)))
    cases = {
        "init": ["init", "--template", "rag"],
        "plan": ["plan", rag],
        "audit": ["audit", str(log), "--slo", "p99=500"],
        "replay": ["replay", str(log), "--timestamp", "ts"],
        "export": ["export", rag, "--to", "keda"],
        "rebudget": ["rebudget", str(budget_for(tmp_path)), str(log)],
        "capacity": ["capacity", str(log), "--slo", "p99=500"],
        "simulate": ["simulate", str(log), "--slo", "p99=500", "--duration", "10m"],
    }
    assert set(cases) >= {n for n in COMMANDS if any("-o" in p.opts for p in _params(n))} - {
        "import"
    }
    for name, args in cases.items():
        out = tmp_path / f"{name}.out"
        assert f"wrote {out}" in _run_to_file(tmp_path, args, out), name
    slo = tmp_path / "slo.yaml"
    runner.invoke(app, ["export", rag, "--to", "openslo", "-o", str(slo)])
    budget = tmp_path / "back.yaml"
    assert f"wrote {budget}" in _run_to_file(tmp_path, ["import", "openslo", str(slo)], budget)


def test_a_failed_gate_is_not_worded_as_bad_input(tmp_path: Path) -> None:
    res = runner.invoke(app, ["plan", str(EXAMPLES / "seed-llm-decode.yaml")])
    assert res.exit_code == 1
    assert "error" not in res.output.lower()
    assert res.stderr.startswith("gate failed: the budget does not fit")
    log = tmp_path / "log.csv"
    log.write_text("total_ms\n" + "".join(f"{100 + i % 50}\n" for i in range(500)))
    res = runner.invoke(app, ["audit", str(log), "--slo", "p99=50", "--fail-on-breach"])
    assert res.exit_code == 1
    assert res.stderr.startswith("gate failed: --fail-on-breach: p99 ")
    assert "error:" not in res.stderr


def test_piped_output_neither_wraps_nor_colours() -> None:
    env = {**os.environ, "COLUMNS": "80", "FORCE_COLOR": ""}
    env.pop("FORCE_COLOR")
    proc = subprocess.run(
        [sys.executable, "-m", "tailbudget", "plan", str(EXAMPLES / "seed-llm-decode.yaml")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 1
    assert "\x1b[" not in proc.stdout
    check = next(ln for ln in proc.stdout.splitlines() if ln.startswith("p99: additive"))
    assert check.endswith("does not fit") and len(check) > 80
    assert "928% of the SLO used" in check and "-828%" not in proc.stdout


def test_library_errors_name_the_flag_on_the_command_line(tmp_path: Path) -> None:
    # The library says `total: ...`; the CLI's one line says `--total: ...`, same value and fix.
    log = tmp_path / "x.csv"
    log.write_text("Latency,rpc\n10,1\n12,2\n", encoding="utf-8")
    line = _error_line(["audit", str(log), "--slo", "p99=500", "--total", "Nope"])
    assert line.startswith("error: --total: column 'Nope' not found") and "Latency" in line
    line = _error_line(["audit", str(log), "--slo", "p99=abc"])
    assert line.startswith("error: --slo p99 must be a finite number")
    line = _error_line(["audit", str(log), "--slo", "p99=500", "--stages", "zz*"])
    assert line.startswith("error: --stages: 'zz*' matches no column")
    line = _error_line(["simulate", str(log), "--slo", "p95=100", "--policy", "sometimes"])
    assert line.startswith("error: --policy must be budget, model, fixed")
