"""Renderers read the typed report records, never their dict form.

An AST check over src/tailbudget/report/: no call that turns a record into a dict or
JSON (to_json, as_dict, to_dict, model_dump...), no string-keyed lookup (`x["p99"]`,
`x.get("p99")`), so a renamed field fails mypy instead of printing "-" in a report.
The JSON renderers that build the contract are the one exception (they write it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[2] / "src" / "tailbudget" / "report"
DICT_FORMS = {"to_json", "as_dict", "to_dict", "model_dump", "model_dump_json", "dict"}
WRITERS = {"plan_json", "rebudget_json", "rebudget_dict"}
"""Functions whose job is to write the JSON contract from the record."""
CONSTANTS = {"PCT_COLORS", "ACTION_COLORS", "rcParams"}
"""Module-level lookup tables (colours, matplotlib settings), not reports."""


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


class _Finder(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[str] = []
        self.where = "module"

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in WRITERS:
            return
        outer, self.where = self.where, node.name
        self.generic_visit(node)
        self.where = outer

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr in DICT_FORMS:
                self.found.append(f"{self.where}:{node.lineno} .{attr}()")
            if attr == "get" and node.args and _is_text(node.args[0]):
                self.found.append(f"{self.where}:{node.lineno} .get({node.args[0].value!r})")  # type: ignore[attr-defined]
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _is_text(node.slice) and _name(node.value) not in CONSTANTS:
            key = node.slice.value  # type: ignore[attr-defined]
            self.found.append(f"{self.where}:{node.lineno} [{key!r}]")
        self.generic_visit(node)


def _violations(path: Path) -> list[str]:
    finder = _Finder()
    finder.visit(ast.parse(path.read_text(encoding="utf-8")))
    return finder.found


MODULES = sorted(REPORT.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPORT)))
def test_renderer_reads_typed_fields(path: Path) -> None:
    assert _violations(path) == []


def test_the_check_catches_each_dict_form(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def render(r):\n"
        "    d = r.model_dump(mode='json')\n"
        "    return d['snapshot'], r.to_json(), r.tail.get('driver'), PCT_COLORS['p50']\n"
    )
    assert [v.split(" ", 1)[1] for v in _violations(bad)] == [
        ".model_dump()",
        "['snapshot']",
        ".to_json()",
        ".get('driver')",
    ]
