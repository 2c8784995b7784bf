"""The layer contract (docs/architecture.md), pinned: imports run one way, down the house.

Measured by scripts/structure.py's AST walk over src/tailbudget, counting what runs at
import time and inside functions (a lazy import is still an arrow), not what only a type
checker reads (`if TYPE_CHECKING:`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "structure.py"


@pytest.fixture(scope="module")
def structure() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tailbudget_structure", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def measured(structure: ModuleType) -> tuple[dict[str, object], dict[str, list[str]]]:
    return structure.measure()  # type: ignore[no-any-return]


def test_every_top_level_module_has_a_layer(structure: ModuleType) -> None:
    names = {p.stem if p.is_file() else p.name for p in structure.PKG.iterdir()}
    names = {n for n in names if n.isidentifier() and n != "py"}
    assert names <= set(structure.LAYER_OF), (
        f"place {sorted(names - set(structure.LAYER_OF))} in scripts/structure.py LAYERS "
        "and docs/architecture.md"
    )


def test_no_import_runs_up_the_layers(measured) -> None:
    _, lists = measured
    assert lists["upward"] == [], "\n".join(lists["upward"])


def test_no_cycle_crosses_packages(measured) -> None:
    counts, lists = measured
    assert counts["cross_package_cycles"] == 0, "\n".join(lists["cycles"])
    assert counts["package_blocks"] == []


def test_in_function_imports_only_guard_start_up(measured) -> None:
    """An import inside a function keeps a library off the module's start-up (the
    target loads a package the module does not), or breaks an import cycle inside one
    package; the rest belong at the top of the module. The count may only fall."""
    counts, lists = measured
    assert counts["in_function_needless"] <= NEEDLESS_AT_MOST, "\n".join(lists["needless"])
    # A cycle inside a package is broken by moving what both sides need below them
    # (sim/engines.py, logs/bench_arrays.py), not by an import inside a function.
    assert counts["in_function_cycle"] <= CYCLE_BREAKERS_AT_MOST, "\n".join(lists["cycle"])


NEEDLESS_AT_MOST = 0
"""Ratchet: lower it as needless in-function imports move to the top of their module."""
CYCLE_BREAKERS_AT_MOST = 0
"""Ratchet: in-function imports that only break an import cycle (6 before issue 38's last
moves)."""


def test_one_percentile_reader_and_one_writer(measured) -> None:
    """`_units.Percentile` / `MetricKey` read and write every `p99.9` and `ttft.p95`: no
    other module holds a percentile regex or a q -> "pNN" formatter."""
    counts, lists = measured
    assert counts["percentile_regexes"] <= 1, "\n".join(lists["pct_regex"])
    assert counts["percentile_formatters"] <= 1, "\n".join(lists["pct_format"])
    assert all(item.startswith("src/tailbudget/_units.py:") for item in lists["pct_regex"])
    assert all(item.startswith("src/tailbudget/_units.py:") for item in lists["pct_format"])


def test_typed_edges_only_gain(measured) -> None:
    """Annotations holding `Any`, and those holding `dict[str, Any]`, stay well under the
    counts before issue 38 (950 and 359): a JSON payload is `_json.JsonDict`, an Ibis
    expression names its type, a record callers index is a dataclass or TypedDict."""
    counts, lists = measured
    assert counts["any_annotations"] <= ANY_AT_MOST, "\n".join(lists["any"][-20:])
    assert counts["dict_str_any"] <= DICT_ANY_AT_MOST, "\n".join(lists["dict_any"][-20:])


ANY_AT_MOST = 630
"""Ratchet: 564 when it was last lowered (issue 38), with room for work in flight; lower
it as `Any` annotations give way to named types."""
DICT_ANY_AT_MOST = 265
"""Ratchet: 237 when it was last lowered (issue 38)."""
