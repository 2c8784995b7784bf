"""Errors speak the caller's language: `.param` names the argument, no message names a flag."""

from __future__ import annotations

import ast
import pickle
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import typer

from tailbudget.budget.objectives import parse_objectives
from tailbudget.cli import app
from tailbudget.errors import LogError, PolicyError, TailbudgetError
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.read import read_log
from tailbudget.sim.arrivals import parse_arrivals
from tailbudget.sim.policies import parse_policy_spec

SRC = Path(__file__).resolve().parents[1] / "src" / "tailbudget"


def _raises(call: Callable[[], object]) -> TailbudgetError:
    with pytest.raises(TailbudgetError) as err:
        call()
    return err.value


def test_api_errors_carry_the_argument_name_and_no_flag(tmp_path: Path) -> None:
    log = tmp_path / "x.csv"
    log.write_text("Latency,rpc\n10,1\n12,2\n", encoding="utf-8")
    cases = {
        "total": lambda: read_log(str(log), ReadOptions(total="Nope")),
        "stages": lambda: read_log(str(log), ReadOptions(stages_glob="zz*")),
        "cohorts": lambda: read_log(str(log), ReadOptions(cohorts=("Latency",))),
        "query": lambda: read_log(None),
        "slo": lambda: parse_objectives("p99=abc"),
        "policy": lambda: parse_policy_spec("sometimes"),
        "arrivals": lambda: parse_arrivals("poisson:-1"),
    }
    for param, call in cases.items():
        exc = _raises(call)
        assert exc.param == param, (param, str(exc))
        assert "--" not in str(exc) and "\n" not in str(exc), str(exc)
        assert param in str(exc), str(exc)


def test_the_param_survives_a_process_boundary() -> None:
    exc = pickle.loads(pickle.dumps(PolicyError("policy x", param="policy")))
    assert isinstance(exc, PolicyError) and exc.param == "policy" and str(exc) == "policy x"
    assert LogError("plain").param is None


def test_mentions_survive_a_process_boundary_and_read_as_flags_on_the_command_line() -> None:
    from tailbudget.cli._common import in_flags
    from tailbudget.errors import said

    message = (
        f"{said('duration', '10000h')} {said('replicas', 5)} {said('policy', 'fixed:9')}: "
        f"one run would hold 9 replica slots (9 policy evaluations); lower it, or raise "
        f"{said('max_events')}"
    )
    names = ("duration", "replicas", "policy", "max_events")
    exc = pickle.loads(pickle.dumps(TailbudgetError(message, mentions=names)))
    assert exc.mentions == names and str(exc) == message
    assert message.startswith("duration='10000h' replicas=5 policy='fixed:9': ")
    assert in_flags(exc) == (
        "--duration 10000h --replicas 5 --policy fixed:9: one run would hold 9 replica "
        "slots (9 policy evaluations); lower it, or raise --max-events"
    )
    stopped = TailbudgetError(
        f"query: stopped; or raise {said('query_timeout')}",
        param="query",
        mentions=("query_timeout",),
    )
    assert in_flags(stopped) == "--query: stopped; or raise --query-timeout"


def _flags() -> set[str]:
    root = typer.main.get_command(app)
    return {
        opt
        for cmd in root.commands.values()  # type: ignore[attr-defined]
        for p in cmd.params
        for opt in p.opts
        if opt.startswith("--")
    }


def _message_strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if is_text and id(node) not in docstrings:
            yield node.lineno, node.value


# Provenance written into an exported file: how to regenerate it, not a message.
_ALLOWED = {("export/common.py", "--to")}


def test_no_library_message_names_a_flag() -> None:
    flags = _flags()
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("cli/"):
            continue
        for line, text in _message_strings(ast.parse(path.read_text(encoding="utf-8"))):
            for flag in re.findall(r"--[a-z][a-z-]*", text):
                if flag in flags and (rel, flag) not in _ALLOWED:
                    found.append(f"{rel}:{line}: {flag} in {text!r}")
    how = (
        "library messages name the argument in neutral words (`total: ...`), not the CLI flag; "
        "raise TailbudgetError(message, param='total') and the CLI's error line says --total\n"
    )
    assert not found, how + "\n".join(found)
