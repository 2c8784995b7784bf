"""A pydantic validation error as the one line a budget file's reader says: the field's
path, what is wrong and the fix (`slo.ttft: 'p100' is not a percentile ...`)."""

from __future__ import annotations

from pydantic import ValidationError

from tailbudget._units import Percentile

__all__ = ["describe"]

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
