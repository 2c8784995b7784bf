"""Which log column is what: resolving the mapping of a tabular log.

Pure Python over column names and types, so it is the same for every engine.
Explicit options win; otherwise tailbudget's defaults (`total_ms`,
`<stage>_ms`, `ts`, `request_id`, `error`) and a few common spellings are
looked for, and every guess is stated in `notes`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tailbudget._names import name_problem
from tailbudget.errors import LogError
from tailbudget.logs.options import ReadOptions

__all__ = ["UNATTRIBUTED", "ColumnMap", "engine_columns", "resolve_columns", "stage_name"]

UNATTRIBUTED = "unattributed"
"""The one name of a request's untimed part (total minus every stage) in the audit's JSON,
its hypotheses and fixes, and a measured budget's pipeline; no log column may take it."""

_TOTAL_GUESSES = (
    "total_ms",
    "latency_ms",
    "duration_ms",
    "e2e_ms",
    "e2e_latency_ms",
    "elapsed_ms",
    "response_time_ms",
    "latency",
    "duration",
    "elapsed",
    "response_time",
    "e2e_latency",
)
_TS_GUESSES = ("ts", "timestamp", "time", "@timestamp", "start_time", "datetime", "date")
_ID_GUESSES = ("request_id", "requestid", "req_id", "id", "trace_id", "traceid")
_ERROR_GUESSES = ("error", "is_error", "failed", "err")
# `_ms` columns that are per-request metrics, not stages of the request's time.
_NOT_STAGES = {"tpot_ms", "itl_ms", "itl_p50_ms", "itl_p95_ms", "itl_mean_ms"}
_RESERVED = {"total", "request_id", "ts", "error", UNATTRIBUTED}


@dataclass(frozen=True)
class ColumnMap:
    """Which raw column plays which canonical role."""

    total: str | None
    stages: dict[str, str]
    """stage name -> raw column"""
    timestamp: str | None
    request_id: str | None
    error: str | None
    shape: tuple[str, ...]
    cohorts: tuple[str, ...]
    extras: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def stage_name(raw: str) -> str:
    """A stage name safe as part of a column name on every engine."""
    name = re.sub(r"[^0-9A-Za-z_]+", "_", raw).strip("_")
    name = re.sub(r"_+", "_", name) or "root"
    if name[0].isdigit():
        name = f"s_{name}"
    return f"{name}_stage" if name.lower() in _RESERVED else name


def resolve_columns(
    columns: Sequence[str],
    numeric: set[str],
    options: ReadOptions,
    source: str,
    *,
    extras: Sequence[str] = (),
) -> ColumnMap:
    """Map raw columns to canonical roles, or raise LogError naming the fix.

    `numeric` holds the columns whose type is numeric (used only for hints).
    `extras` are reader-made columns carried through unchanged.
    """
    cols = list(columns)
    notes: list[str] = []

    def find(col: str, param: str) -> str:
        return _find(cols, col, param, source)

    def guess(names: Sequence[str]) -> str | None:
        lower = {c.lower(): c for c in cols}
        return next((lower[n] for n in names if n in lower), None)

    total = find(options.total, "total") if options.total else None
    if total is None:
        total = guess(_TOTAL_GUESSES)
        if total is not None and total != "total_ms":
            notes.append(
                f"total latency taken from column {total!r} (name another with total to change)"
            )
            if not total.lower().endswith("_ms") and options.unit is None:
                notes.append(
                    f"{total!r} assumed to be in milliseconds (set unit to s or us if not)"
                )

    timestamp = find(options.timestamp, "timestamp") if options.timestamp else guess(_TS_GUESSES)
    request_id = (
        find(options.request_id, "request_id") if options.request_id else guess(_ID_GUESSES)
    )
    error = find(options.error, "error") if options.error else guess(_ERROR_GUESSES)
    shape = tuple(find(c, "shape") for c in options.shape)
    cohorts = tuple(find(c, "cohorts") for c in options.cohorts)
    roles = {total: "total latency", timestamp: "timestamp", error: "error flag"}
    _check_roles(source, roles, "cohorts", cohorts, "a grouping column such as route")
    roles[request_id] = "request id"
    _check_roles(source, roles, "shape", shape, "a size column such as input_tokens")
    taken = {total, timestamp, request_id, error, *shape, *cohorts, *extras}

    explicit = options.stage_map()
    stages = _stage_columns(cols, taken, options, source)
    stages = _unique_stages(stages)
    _check_names(source, [total, timestamp, *stages.values()], "stages" if stages else "total")

    if total is None and not stages:
        hint = [c for c in cols if c in numeric]
        raise LogError(
            f"{source}: no latency column found (looked for total_ms and <stage>_ms); "
            f"columns are: {_list(cols)}; name them with total (a column) and stages "
            "(column names or globs)" + (f" (numeric: {_list(hint)})" if hint else ""),
            param="total",
        )
    if explicit is None and not options.stages_glob and not stages:
        unused = [c for c in cols if c in numeric and c not in taken]
        if unused:
            notes.append(
                "no <stage>_ms columns; numeric columns not used as stages: "
                f"{_list(unused)} (map them with stages: column names or globs)"
            )
    return ColumnMap(
        total=total,
        stages=stages,
        timestamp=timestamp,
        request_id=request_id,
        error=error,
        shape=shape,
        cohorts=cohorts,
        extras=tuple(e for e in extras if e in cols and e not in stages.values()),
        notes=tuple(notes),
    )


def _check_names(source: str, chosen: Sequence[str | None], param: str) -> None:
    """A column read as a stage (or the total, the time) names it in every report and
    budget: a control character in it (a NUL, a line break, NEL, U+2028) is refused with
    the rule a budget's stage names follow (tailbudget._names)."""
    for col in chosen:
        problem = None if col is None else name_problem(col)
        if problem is not None:
            raise LogError(
                f"{source}: column {col!a} {problem}; rename the column (a stage keeps "
                "its column's name, and names may not hold such characters)",
                param=param,
            )


def _find(cols: Sequence[str], col: str, param: str, source: str) -> str:
    """The column named `col` (exactly, else the one equal without case), or a one-line error."""
    if col in cols:
        return col
    folded = [c for c in cols if c.lower() == col.lower()]
    if len(folded) == 1:
        return folded[0]
    raise LogError(
        f"{param}: column {col!r} not found in {source}; columns are: {_list(cols)}",
        param=param,
    )


def _stage_columns(
    cols: Sequence[str], taken: set[str | None], options: ReadOptions, source: str
) -> dict[str, str]:
    """Stage name -> column: as mapped, as globbed, or every other `<stage>_ms` column."""
    explicit = options.stage_map()
    if explicit is not None:
        return {k: _find(cols, v, "stage", source) for k, v in explicit.items()}
    if options.stages_glob:
        globs = [g.strip() for g in options.stages_glob.split(",") if g.strip()]
        matched = [
            c for c in cols if c not in taken and any(fnmatch.fnmatchcase(c, g) for g in globs)
        ]
        if not matched:
            raise LogError(
                f"stages: {options.stages_glob!r} matches no column of {source}; "
                f"columns are: {_list(cols)}",
                param="stages",
            )
        return {_stage_of(c): c for c in matched}
    return {
        _stage_of(c): c
        for c in cols
        if c.endswith("_ms") and c not in taken and c.lower() not in _NOT_STAGES
    }


def _check_roles(
    source: str, roles: Mapping[str | None, str], param: str, chosen: Sequence[str], kind: str
) -> None:
    """A column given to `param` must not already play another role (one line, exit 2)."""
    for col in chosen:
        role = roles.get(col)
        if role is not None:
            raise LogError(
                f"{param} {col!r}: in {source} that is the log's {role} column; "
                f"give {param} {kind}",
                param=param,
            )


def _stage_of(column: str) -> str:
    return column[:-3] if column.endswith("_ms") and len(column) > 3 else column


def _unique_stages(stages: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, column in stages.items():
        # The stage keeps the name the log gave it (engine identifiers are made apart,
        # by `engine_columns`); only names the canonical table reserves are changed.
        base = f"{name}_stage" if name.lower() in _RESERVED else (name or "root")
        unique, i = base, 2
        while unique.lower() in {k.lower() for k in out}:  # engines fold case
            unique, i = f"{base}_{i}", i + 1
        out[unique] = column
    return out


def engine_columns(stages: Sequence[str], taken: Sequence[str]) -> dict[str, str]:
    """Stage name -> a column name safe on every engine, unique without case.

    `ts-seat-service_getLeftTicketOfInterval` is a stage's name in every report; on the
    engine its column is `ts_seat_service_getLeftTicketOfInterval_ms`. Two stages whose
    names differ only by `-` and `_` get distinct columns, each mapped to its own stage.
    """
    used = {c.lower() for c in taken}
    out: dict[str, str] = {}
    for stage in stages:
        base = stage_name(stage)
        column, i = f"{base}_ms", 2
        while column.lower() in used:
            column, i = f"{base}_{i}_ms", i + 1
        used.add(column.lower())
        out[stage] = column
    return out


def _list(cols: Sequence[str], limit: int = 30) -> str:
    shown = ", ".join(cols[:limit])
    return shown + (f", ... ({len(cols)} in all)" if len(cols) > limit else "")
