"""Reading a budget file, with errors that name the field path and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tailbudget._units import Percentile
from tailbudget.budget.model import Budget
from tailbudget.budget.objectives import Objectives
from tailbudget.budget.slo import SLO
from tailbudget.budget.yaml_safe import YamlError, load_yaml
from tailbudget.errors import BudgetError

_MS_FIELDS = {"p50", "p95", "p99", "ttft_ms", "tail_ms", "overhead_ms"}
_LIST_KEYS = {"pipeline", "parallel", "sequence"}
_TAGS = {"stage", "parallel", "sequence"}
_NUMBER_ERRORS = {
    "float_type",
    "float_parsing",
    "greater_than",
    "greater_than_equal",
    "finite_number",
    "int_type",
    "int_parsing",
    "int_from_float",
}


def load_budget(path: str | Path) -> Budget:
    """Read and validate a budget file; raise BudgetError with a one-line message."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BudgetError(
            f"{p}: budget file not found (create one with `tailbudget init`)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BudgetError(
            f"{p}: cannot read budget file ({exc.__class__.__name__}: {exc})"
        ) from None
    return parse_budget(text, source=str(p))


def parse_budget(text: str | dict[str, Any], *, source: str = "<budget>") -> Budget:
    """Validate YAML text (or an already-parsed mapping) as a budget."""
    if isinstance(text, str):
        try:
            data = load_yaml(text)
        except YamlError as exc:
            raise BudgetError(f"{source}: {exc}") from None
        except Exception as exc:  # the YAML parser raises more than YAMLError on odd input
            raise BudgetError(f"{source}: not valid YAML: {exc}".splitlines()[0]) from None
    else:
        data = text
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise BudgetError(
            f"{source}: a budget file must be a mapping with slo: and pipeline:, got {kind}"
        )
    try:
        return Budget.model_validate(data)
    except ValidationError as exc:
        raise BudgetError(f"{source}: {describe(exc)}") from None


def read_slo_block(data: Mapping[str, Any], *, environment: str | None = None) -> Objectives:
    """A budget file's `slo:` block given as a mapping (flat `{p99: 900}` or full
    `{ttft: {p95: 500}, goodput: {min: 0.95}}`) read into Objectives, as a budget file's is;
    a one-line BudgetError naming the block's path (param `slo`) when it is invalid."""
    try:
        block = SLO.model_validate(dict(data))
    except ValidationError as exc:
        what = describe(exc)
        where = "slo" if what.startswith("(top level)") else "slo."
        raise BudgetError(where + what.removeprefix("(top level)"), param="slo") from None
    return block.objectives(environment)


def _is_ms(loc: tuple[int | str, ...], last: str) -> bool:
    # Objective targets are keyed by any percentile (p99.9) or, under goodput, by metric.
    if last in _MS_FIELDS or Percentile.shaped(last):
        return True
    return len(loc) >= 3 and loc[0] == "slo" and loc[1] == "goodput" and last != "min"


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    skip_next_tag = False
    prev: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            skip_next_tag = prev in _LIST_KEYS
        elif skip_next_tag and part in _TAGS:
            skip_next_tag = False
        else:
            skip_next_tag = False
            out += f".{part}" if out else str(part)
        prev = part
    return out or "(top level)"


def describe(exc: ValidationError) -> str:
    """The first validation error as 'path: what is wrong, got X' (plus a count of others)."""
    errors = exc.errors(include_url=False)
    err = errors[0]
    loc = tuple(err["loc"])
    path = _path(loc)
    kind = err["type"]
    got = err.get("input")
    last = next((p for p in reversed(loc) if isinstance(p, str) and p not in _TAGS), "")
    if kind == "missing":
        msg = "is required"
    elif kind == "extra_forbidden":
        msg = "unknown key; check the spelling (see `tailbudget init` for every key)"
    elif kind in ("union_tag_not_found", "union_tag_invalid"):
        msg = (
            "each entry needs a `stage:` name, a `parallel:` list or a `sequence:` list, "
            f"got {got!r}"
        )
    elif loc[:2] == ("slo", "goodput") and last == "min":
        msg = f"must be a share of requests in (0, 1], e.g. 0.95, got {got!r}"
    elif kind in _NUMBER_ERRORS and _is_ms(loc, last):
        msg = f"must be a positive number of milliseconds, got {got!r}"
    else:
        msg = str(err["msg"]).removeprefix("Value error, ")
        if kind != "value_error" and not isinstance(got, dict | list):
            msg += f", got {got!r}"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return f"{path}: {msg}{more if len(errors) > 1 else ''}"
