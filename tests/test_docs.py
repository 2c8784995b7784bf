"""The README and docs/ name only options that exist, on the command they name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main

from tailbudget.cli import app

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# Flags of other tools that the docs name in passing: vLLM's and SGLang's benchmarks, pytest.
# guidellm (--profile, --override), pip (--no-deps), curl (-d on a continued line).
FOREIGN = {"--save-result", "--save-detailed", "--output-details", "--goodput", "-m"}
FOREIGN |= {"--profile", "--override", "--no-deps", "-d"}
# Lines that run another program (curl, pip, a benchmark tool) carry that program's flags.
_OWN = ("tailbudget", "python", "python3", "make", "$")
_OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][a-zA-Z0-9-]*)")
_CODE = re.compile(r"```[a-z]*\n(.*?)```|`([^`\n]+)`", re.S)
_INTERNAL = re.compile(r"seed framework|the issue|\bBRIEF\b|DESIGN\.md|\bhelper\b", re.I)


def _commands() -> dict[str, Any]:
    # Typer vendors its own click: walk the tree by its attributes, not click's classes.
    root: Any = typer.main.get_command(app)
    out: dict[str, Any] = {}
    for name, cmd in root.commands.items():
        out[name] = cmd
        for sub, c in getattr(cmd, "commands", {}).items():
            out[f"{name} {sub}"] = c
    return out


def _options(cmd: Any) -> set[str]:
    names = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    return names | {"--help"}


def _bench_options(script: str) -> set[str]:
    text = (REPO / "bench" / script).read_text(encoding="utf-8")
    return set(re.findall(r"""["'](--[a-z][a-z0-9-]*)["']""", text))


def _snippets(text: str) -> list[str]:
    return [block or inline for block, inline in _CODE.findall(text)]


def _command_lines(text: str) -> list[tuple[str, str]]:
    """(program, rest of line) for each `tailbudget ...` or `python bench/x.py ...` in code."""
    found = []
    for snippet in _snippets(text):
        for line in snippet.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0]
            # `import tailbudget as tb` is Python (docs/python.md), not a command line
            pattern = r"(?:(?<!import )tailbudget|python3? (bench/\w+\.py))\b(.*)"
            for m in re.finditer(pattern, line):
                found.append((m.group(1) or "tailbudget", m.group(2)))
    return found


def _resolve(commands: dict[str, Any], rest: str) -> tuple[str, Any] | None:
    words = rest.split()
    for n in (2, 1):
        name = " ".join(words[:n])
        if name in commands:
            return name, commands[name]
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_option_named_on_a_command_line_belongs_to_that_command(page: Path) -> None:
    commands = _commands()
    bad = []
    for program, rest in _command_lines(page.read_text(encoding="utf-8")):
        if program != "tailbudget":
            allowed = _bench_options(Path(program).name)
            label = program
        else:
            hit = _resolve(commands, rest)
            if hit is None:
                word = re.match(r"\s+([a-z]+)\b", rest)
                if word:
                    bad.append(f"unknown command {word.group(1)!r}")
                continue
            label, cmd = hit
            allowed = _options(cmd)
        bad += [f"{label}: {o}" for o in _OPTION.findall(rest) if o not in allowed]
    assert not bad, f"{page.name} names options that do not exist: {bad}"


def _ours(line: str) -> bool:
    words = line.split()
    if not words or words[0].startswith("-") or "`" in line:
        return True
    first = words[0]
    is_program = first.isidentifier() or "/" in first or "-" in first
    if first in _OWN or not is_program:
        return True
    return not (len(words) > 1 and any(w.startswith("-") for w in words[1:]))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_option_named_in_prose_exists_somewhere(page: Path) -> None:
    known = set().union(*(_options(c) for c in _commands().values()))
    for script in (REPO / "bench").glob("*.py"):
        known |= _bench_options(script.name)
    for script in (REPO / "scripts").glob("*.py"):
        known |= set(re.findall(r"""["'](--[a-z][a-z0-9-]*)["']""", script.read_text()))
    lines = [ln for s in _snippets(page.read_text(encoding="utf-8")) for ln in s.splitlines()]
    named = {o for ln in lines if _ours(ln) for o in _OPTION.findall(ln)}
    unknown = sorted(o for o in named - known - FOREIGN if not o.startswith("--/"))
    assert not unknown, f"{page.name} names options no command has: {unknown}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_speak_to_users(page: Path) -> None:
    hits = _INTERNAL.findall(page.read_text(encoding="utf-8"))
    assert not hits, f"{page.name} uses internal terms: {hits}"


def test_readme_keeps_the_quick_start_and_what_the_tests_need() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "```bash\npip install . && tailbudget demo\n```" in readme
    assert "```bash\nmake test\n```" in readme
    for needed in ("../shared/data", "constraints.txt", "make lock", "prometheus", "chromium"):
        assert needed in readme
    assert "chromium-driver" in readme and "Java" in readme
    assert "docs/benchmarks.md" in readme
    assert readme.index("## A short tour") < readme.index("## Speed")
    assert len(readme) < 12_000, "long reference material belongs in docs/"


def test_user_facing_sources_speak_to_users() -> None:
    report = (REPO / "src" / "tailbudget" / "audit" / "report.py").read_text(encoding="utf-8")
    assert not _INTERNAL.findall(report)
