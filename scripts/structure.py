"""Measure the package's structure from its AST (issue 38): `python scripts/structure.py`.

Counts, over src/tailbudget:
- upward arrows: imports from a module to a module of a higher layer (LAYERS below,
  bottom first; the order DESIGN.md "Layers" and docs/architecture.md write down),
  counted per (importer, imported) module pair, at runtime (TYPE_CHECKING blocks are
  not runtime) and including imports inside functions;
- cycles: strongly connected sets of modules (runtime edges, in-function included),
  and those crossing packages; package-level strongly connected blocks;
- in-function imports (statements inside a def);
- `Any` annotations, and those holding `dict[str, Any]`;
- percentile regexes (regex literals matching `pNN`) and q -> "pNN" formatters.

`--json` prints the counts as JSON; `--list KIND` prints the items of one count
(upward, cycles, infunction, any, dict_any, pct_regex, pct_format).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "tailbudget"
BEFORE = Path(__file__).with_name("structure_before.json")  # measured before the first move

# Bottom first. A module may import its own layer and any layer below it.
LAYERS: list[tuple[str, ...]] = [
    # the shared base: formatter, units, errors, JSON writer, the report base (its render
    # registry is filled by report/), the fleet presets
    (
        "_version",
        "_fmt",
        "errors",
        "_units",
        "_json",
        "_arrow_numpy",
        "_metric_names",
        "_fleet",
        "_report_base",
        "_render",
        "_names",
        "_verdict",
    ),
    ("sketch",),
    ("budget",),
    ("measure",),
    ("logs",),
    ("audit",),
    ("control",),
    ("sim",),
    ("serve",),
    ("budgeting",),
    ("export",),
    ("report",),
    ("demo", "otel", "_api"),
    ("cli", "__init__", "__main__"),
]
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@dataclass(frozen=True)
class Import:
    module: str
    where: str
    in_func: bool
    targets: frozenset[str]  # tailbudget modules
    libraries: frozenset[str]  # top-level names of other packages (not the standard library)
    stdlib: bool


@dataclass
class Found:
    imports: list[Import] = field(default_factory=list)
    edges: set[tuple[str, str]] = field(default_factory=set)
    infunction: list[str] = field(default_factory=list)
    any_ann: list[str] = field(default_factory=list)
    dict_any: list[str] = field(default_factory=list)
    pct_regex: list[str] = field(default_factory=list)
    pct_format: list[str] = field(default_factory=list)


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _targets(
    module: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, known: set[str]
) -> set[str]:
    names: set[str] = set()
    if isinstance(node, ast.Import):
        names = {a.name for a in node.names}
    else:
        base = _resolve(module, is_pkg, node)
        subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
        # `from pkg import sub` runs pkg/__init__ too, but the arrow that matters is to sub
        names = subs if len(subs) == len(node.names) else {base, *subs}
    out = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name.startswith("tailbudget"):
            out.add(name)
    return out


_STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


def _libraries(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        names = {a.name.split(".")[0] for a in node.names}
    else:
        names = set() if node.level else {(node.module or "").split(".")[0]}
    return names - {"tailbudget", ""}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


_PCT_MARKS = ("p(\\d", "p\\d", "p[0-9", "p([0-9", "[pP]")


def _scan(path: Path, module: str, known: set[str], found: Found) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    where = f"src/{path.relative_to(PKG.parent)}"

    def visit(node: ast.AST, in_func: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            func = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            tc = typing_only or (isinstance(child, ast.If) and _is_type_checking(child))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if in_func:
                    found.infunction.append(f"{where}:{child.lineno}")
                if not typing_only:
                    targets = _targets(module, is_pkg, child, known) - {module}
                    for target in targets:
                        found.edges.add((module, target))
                    libs = _libraries(child)
                    found.imports.append(
                        Import(
                            module,
                            f"{where}:{child.lineno}",
                            in_func,
                            frozenset(targets),
                            frozenset(libs - _STDLIB),
                            bool(libs & _STDLIB),
                        )
                    )
            _annotations(child, where, found)
            _percentiles(child, where, found)
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.body:
                    visit_one(sub, func, True)
                for sub in child.orelse:
                    visit_one(sub, func, typing_only)
                continue
            visit(child, func, tc if not isinstance(child, ast.If) else typing_only)

    def visit_one(node: ast.AST, in_func: bool, typing_only: bool) -> None:
        wrapper = ast.Module(body=[node], type_ignores=[])  # type: ignore[list-item]
        visit(wrapper, in_func, typing_only)

    visit(tree, False, False)


def _annotations(node: ast.AST, where: str, found: Found) -> None:
    anns: list[ast.expr] = []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None and arg.annotation is not None:
                anns.append(arg.annotation)
        if node.returns is not None:
            anns.append(node.returns)
    elif isinstance(node, ast.AnnAssign):
        anns.append(node.annotation)
    for ann in anns:
        text = ast.unparse(ann)
        if "Any" in {n.id for n in ast.walk(ann) if isinstance(n, ast.Name)} or "Any" in text.split(
            "'"
        ):
            found.any_ann.append(f"{where}:{ann.lineno}: {text}")
            if "dict[str, Any]" in text.replace("Dict[", "dict[") or "Mapping[str, Any]" in text:
                found.dict_any.append(f"{where}:{ann.lineno}: {text}")


def _percentiles(node: ast.AST, where: str, found: Found) -> None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "re":
            for arg in node.args[:1]:
                for const in ast.walk(arg):
                    text = const.value if isinstance(const, ast.Constant) else None
                    if isinstance(text, str) and any(mark in text for mark in _PCT_MARKS):
                        found.pct_regex.append(f"{where}:{node.lineno}: {const.value}")
    if isinstance(node, ast.JoinedStr) and len(node.values) >= 2:
        head, nxt = node.values[0], node.values[1]
        if (
            isinstance(head, ast.Constant)
            and isinstance(head.value, str)
            and head.value in ("p", ".p")
            and isinstance(nxt, ast.FormattedValue)
        ):
            found.pct_format.append(f"{where}:{node.lineno}: {ast.unparse(node)}")


def _sccs(nodes: set[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of size > 1."""
    succ: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


def _is_parent(a: str, b: str) -> bool:
    """A package's __init__ importing its own submodule (or the reverse) is not a cycle of
    design: importing `x.y` runs `x/__init__` first by Python's rules."""
    return b.startswith(a + ".") or a.startswith(b + ".")


def _closures(found: Found, known: set[str]) -> dict[str, frozenset[str]]:
    """Per module: the libraries its import loads (its top-level imports, transitively,
    and its parent packages')."""
    direct: dict[str, set[str]] = defaultdict(set)
    deps: dict[str, set[str]] = defaultdict(set)
    for imp in found.imports:
        if not imp.in_func:
            direct[imp.module] |= imp.libraries
            deps[imp.module] |= imp.targets
    for m in known:
        parent = m.rpartition(".")[0]
        if parent in known:
            deps[m].add(parent)
    out: dict[str, frozenset[str]] = {}

    def closure(m: str, seen: set[str]) -> set[str]:
        if m in out:
            return set(out[m])
        libs = set(direct[m])
        for d in deps[m]:
            if d not in seen:
                seen.add(d)
                libs |= closure(d, seen)
        return libs

    for m in known:
        out[m] = frozenset(closure(m, {m}))
    return out


def classify(found: Found, known: set[str], cycles: list[list[str]]) -> dict[str, list[str]]:
    """In-function imports: those that keep a library off the importing module's start-up
    (the target loads a package the module does not load already), those inside a cycle
    (the import order needs them), and the rest (needless: they could be at the top)."""
    loads = _closures(found, known)
    cycle_of = {m: i for i, c in enumerate(cycles) for m in c}
    out: dict[str, list[str]] = {"startup": [], "cycle": [], "needless": []}
    for imp in found.imports:
        if not imp.in_func:
            continue
        mine = loads[imp.module]
        pulled = set(imp.libraries)
        for t in imp.targets:
            pulled |= loads[t]
        if imp.module.split(".")[:2] in (
            ["tailbudget"],
            ["tailbudget", "_api"],
            ["tailbudget", "cli"],
        ):
            # the entry points: `import tailbudget` and `tailbudget --help` load the
            # command's library only when it runs (tests/cli/test_startup.py)
            out["startup"].append(f"{imp.where} (entry point)")
        elif pulled - mine:
            out["startup"].append(f"{imp.where} ({', '.join(sorted(pulled - mine)[:3])})")
        elif any(cycle_of.get(t, -1) == cycle_of.get(imp.module, -2) for t in imp.targets):
            out["cycle"].append(imp.where)
        else:
            out["needless"].append(imp.where)
    return out


def measure() -> tuple[dict[str, object], dict[str, list[str]]]:
    files = sorted(PKG.rglob("*.py"))
    known = {module_name(p) for p in files}
    found = Found()
    for path in files:
        _scan(path, module_name(path), known, found)
    edges = {(a, b) for a, b in found.edges if not _is_parent(a, b)}
    upward = sorted(
        f"{a} -> {b}"
        for a, b in edges
        if LAYER_OF.get(package_of(a), 99) < LAYER_OF.get(package_of(b), 99)
    )
    cycles = _sccs(known, edges)
    cross = [c for c in cycles if len({package_of(m) for m in c}) > 1]
    pkg_edges = {(package_of(a), package_of(b)) for a, b in edges if package_of(a) != package_of(b)}
    kinds = classify(found, known, cycles)
    pkg_blocks = _sccs({package_of(m) for m in known}, pkg_edges)
    counts: dict[str, object] = {
        "modules": len(known),
        "lines": sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files),
        "upward_arrows": len(upward),
        "module_cycles": len(cycles),
        "cross_package_cycles": len(cross),
        "largest_cycle": max((len(c) for c in cycles), default=0),
        "package_blocks": [sorted(b) for b in pkg_blocks],
        "in_function_imports": len(found.infunction),
        "in_function_startup": len(kinds["startup"]),
        "in_function_cycle": len(kinds["cycle"]),
        "in_function_needless": len(kinds["needless"]),
        "any_annotations": len(found.any_ann),
        "dict_str_any": len(found.dict_any),
        "percentile_regexes": len(found.pct_regex),
        "percentile_formatters": len(found.pct_format),
    }
    lists = {
        "upward": upward,
        "cycles": [" ".join(c) for c in cycles],
        "infunction": found.infunction,
        "any": found.any_ann,
        "dict_any": found.dict_any,
        "pct_regex": found.pct_regex,
        "pct_format": found.pct_format,
        **kinds,
    }
    return counts, lists


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--src", type=Path, help="another checkout's src/tailbudget")
    parser.add_argument(
        "--list",
        choices=[
            "upward",
            "cycles",
            "infunction",
            "any",
            "dict_any",
            "pct_regex",
            "pct_format",
            "startup",
            "cycle",
            "needless",
        ],
    )
    args = parser.parse_args()
    if args.src:
        global PKG
        PKG = args.src.resolve()
    counts, lists = measure()
    if args.list:
        print("\n".join(lists[args.list]))
    elif args.json:
        print(json.dumps(counts, indent=1))
    else:
        before = json.loads(BEFORE.read_text()) if BEFORE.is_file() else {}
        print(f"{'':24} {'before (issue 38)':>20} {'now':>20}")
        for key, value in counts.items():
            if key == "package_blocks":
                continue
            print(f"{key:24} {before.get(key, ''):>20} {value:>20}")
        print(f"package blocks before: {before.get('package_blocks')}")
        print(f"package blocks now:    {counts['package_blocks']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
