"""Arrow bodies: an Arrow IPC stream (`Content-Type: application/vnd.apache.arrow.stream`).

The columns are those of the columnar JSON body (`columns_body`), typed:

- `total_ms` (required), `ttft_ms`, `tpot_ms`, `itl_p50_ms`, `itl_p99_ms`:
  integer or floating point milliseconds;
- `output_tokens`: an integer column (or floating point holding whole numbers);
- `ts`: epoch seconds (integer or floating point), or a timestamp with a time zone;
- `error`: boolean (or integer 0/1);
- `itl_ms`: a list of numbers per observation, every inter-token gap;
- `stages`: a struct with one numeric field per stage name.

A null is an absent value, as `null` is in JSON (a null `ts` is when the server
received the batch). Other columns are ignored. The values are checked by the
rules of the JSON bodies, with the same one-line errors naming the item; no
value becomes a Python object, which is why a client sending at volume (or a
sidecar holding a pyarrow table already) should prefer this form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tailbudget.control.service.columns_body import checked_stamps, checked_totals
from tailbudget.control.service.ingest import (
    MAX_BATCH,
    BadBatch,
    ParsedBatch,
    _check_stage_name,
)
from tailbudget.control.service.llm_fields import BadField, Scalar, llm_series, vouched
from tailbudget.control.stage_windows import MAX_STAGES
from tailbudget.control.wal import StageColumn

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ARROW_STREAM", "parse_arrow"]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
"""The media type of an Arrow IPC stream (IANA registered)."""

_SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _table(body: bytes) -> pa.Table:
    import pyarrow as pa

    try:
        # One thread: a batch is small, and pyarrow's pool would only add wake-ups.
        options = pa.ipc.IpcReadOptions(use_threads=False)
        table = pa.ipc.open_stream(pa.py_buffer(body), options=options).read_all()
        # Full validation: offsets and lengths a hostile body could forge are checked
        # before any buffer is read.
        table.validate(full=True)
    # pyarrow reports a truncated body as an OSError: caught here, it is the client's
    # fault (a 400), never the disk's (the 503 an OSError means past this point).
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadBatch(
            f"body is not a valid Arrow IPC stream ({first}); "
            f"send pyarrow.ipc.new_stream output as {ARROW_STREAM}"
        ) from None
    return table


def _kind(arr: pa.Array) -> str:
    import pyarrow as pa

    t = arr.type
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    return str(t)


def _array(table: pa.Table, key: str) -> pa.Array | None:
    """The column `key` as one array (None when absent); one chunk is taken as it is."""
    where = table.schema.get_all_field_indices(key)
    if not where:
        return None
    if len(where) > 1:
        raise BadBatch(f"column {key} appears {len(where)} times in the Arrow body; send it once")
    chunked = table.column(where[0])
    return chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()


def _numbers(
    table: pa.Table, key: str, want: str
) -> tuple[npt.NDArray[np.float64], Any, bool] | None:
    """A numeric column as float64 (NaN where null), its present mask (None: no nulls)
    and whether it is an integer column; None when absent or every value is null."""
    arr = _array(table, key)
    if arr is None:
        return None
    kind = _kind(arr)
    if kind == "null" or arr.null_count == len(arr):
        return None
    if kind not in ("int", "float"):
        raise BadBatch(f"column {key} must be {want}, got an Arrow {kind} column")
    values, present = _as_float(arr)
    return values, present, kind == "int"


def _as_float(arr: pa.Array) -> tuple[npt.NDArray[np.float64], Any]:
    # Without nulls a numeric column is read in place (zero copy); pyarrow turns the
    # nulls of one into NaN, and the mask says which were nulls.
    if arr.null_count == 0:
        return arr.to_numpy().astype(np.float64, copy=False), None
    values = arr.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    return values, ~arr.is_null().to_numpy(zero_copy_only=False)


def _scalar_of(table: pa.Table, n: int) -> Scalar:
    def scalar(key: str) -> tuple[npt.NDArray[np.float64] | None, Any]:
        got = _numbers(table, key, "numbers")
        if got is None:
            return None, np.zeros(n, dtype=bool)
        values, present, whole = got
        return vouched(values, present, key, whole, lambda i: f"{values[i]:g}")

    return scalar


def _itl_of(table: pa.Table) -> dict[str, StageColumn]:
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = _array(table, "itl_ms")
    if arr is None or pa.types.is_null(arr.type) or arr.null_count == len(arr):
        return {}
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise BadBatch(f"column itl_ms must be a list of gaps (ms) each, got an Arrow {arr.type}")
    gaps = arr.flatten()  # the gaps of the non-null lists, in row order
    if _kind(gaps) not in ("int", "float"):
        raise BadBatch(f"column itl_ms must hold numbers (ms), got lists of {gaps.type}")
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    rows = np.repeat(np.arange(len(arr), dtype=np.int64), lengths.astype(np.int64))
    ms, present = _as_float(gaps)
    bad = ~((ms >= 0) & (ms < np.inf))
    if present is not None:
        bad |= ~present  # a null gap is not a gap
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise BadBatch(f"item {rows[k]}: itl_ms gaps must be numbers >= 0, got {ms[k]:g}")
    return {"itl": StageColumn(rows, ms)} if ms.size else {}


def _stamps(table: pa.Table, n: int, now_s: float) -> npt.NDArray[np.float64]:
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = _array(table, "ts")
    if arr is None:
        return np.full(n, now_s)
    if pa.types.is_timestamp(arr.type):
        if arr.type.tz is None:
            raise BadBatch(
                "column ts is a timestamp without a time zone; "
                "send a timestamp with one (UTC) or epoch seconds"
            )
        scale = _SECONDS_PER_UNIT[arr.type.unit]
        arr = pc.cast(arr, pa.int64())
        values, present = _as_float(arr)
        values = values * scale
    elif _kind(arr) == "null":
        return np.full(n, now_s)
    elif _kind(arr) in ("int", "float"):
        values, present = _as_float(arr)
    else:
        raise BadBatch(f"column ts must be epoch seconds or a timestamp, got an Arrow {arr.type}")
    if present is not None:
        values[~present] = now_s  # null: received now
    return checked_stamps(values, now_s, lambda i: f"{values[i]:g}")


def _errors(table: pa.Table, n: int) -> npt.NDArray[np.bool_]:
    import pyarrow as pa

    arr = _array(table, "error")
    if arr is None:
        return np.zeros(n, dtype=bool)
    if pa.types.is_boolean(arr.type):
        if arr.null_count:  # null: no error, as in JSON
            arr = arr.fill_null(False)
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)
    if _kind(arr) == "null":
        return np.zeros(n, dtype=bool)
    if _kind(arr) != "int":
        raise BadBatch(f"column error must be boolean (or 0/1), got an Arrow {arr.type}")
    values, present = _as_float(arr)
    if present is not None:
        values[~present] = 0.0  # null: no error, as in JSON
    bad = (values != 0) & (values != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadBatch(f"item {i}: error must be true/false or 0/1, got {values[i]:g}")
    return np.asarray(values == 1, dtype=bool)


def _stages(table: pa.Table) -> dict[str, StageColumn]:
    import pyarrow as pa

    arr = _array(table, "stages")
    if arr is None:
        return {}
    if not pa.types.is_struct(arr.type):
        raise BadBatch(
            f"column stages must be a struct of one numeric field per stage, got {arr.type}"
        )
    if arr.type.num_fields > MAX_STAGES:
        raise BadBatch(
            f"more than {MAX_STAGES} stage names in one batch; "
            "name stages by pipeline step, not per request"
        )
    out: dict[str, StageColumn] = {}
    # flatten() gives each field with the struct's nulls applied: a null struct is an
    # observation without stage times.
    for k, (field, child) in enumerate(zip(arr.type, arr.flatten(), strict=True)):
        _check_stage_name(0, field.name, k)
        if _kind(child) == "null":
            continue
        if _kind(child) not in ("int", "float"):
            raise BadBatch(f"stages.{field.name} must be numbers (ms), got an Arrow {child.type}")
        ms, present = _as_float(child)
        have = np.ones(len(ms), dtype=bool) if present is None else present
        bad = have & ~((ms >= 0) & (ms < np.inf))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise BadBatch(
                f"item {i}: stages.{field.name} must be a number >= 0 (ms), got {ms[i]:g}"
            )
        if present is None:
            out[field.name] = StageColumn.every_row(ms)
        elif have.any():
            index = np.flatnonzero(have).astype(np.int64)
            out[field.name] = StageColumn(index, ms[index])
    return out


def parse_arrow(body: bytes, *, now_s: float) -> ParsedBatch:
    """Validate an Arrow IPC stream body, or raise BadBatch with a one-line reason."""
    import pyarrow as pa

    table = _table(body)
    try:
        return _batch(table, now_s)
    except UnicodeDecodeError:  # a forged column or field name
        raise BadBatch("a column or field name in the Arrow body is not UTF-8") from None
    except pa.ArrowException as exc:  # a forged buffer the validation let through
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadBatch(f"the Arrow body cannot be read as observations ({first})") from None


def _batch(table: pa.Table, now_s: float) -> ParsedBatch:
    n = table.num_rows
    if "total_ms" not in table.column_names:
        names = ", ".join(table.column_names[:8]) or "none"
        raise BadBatch(f"the Arrow body has no total_ms column (columns: {names})")
    if n == 0:
        raise BadBatch("no observations in the body")
    if n > MAX_BATCH:
        raise BadBatch(f"{n} observations in one request; send at most {MAX_BATCH}")
    got = _numbers(table, "total_ms", "milliseconds (numbers)")
    if got is None or got[1] is not None:
        i = 0 if got is None else int(np.flatnonzero(~got[1])[0])
        raise BadBatch(f"item {i}: total_ms must be a number >= 0 (milliseconds), got null")
    values = got[0]
    total = checked_totals(values, lambda i: f"{values[i]:g}")
    ts = _stamps(table, n, now_s)
    error = _errors(table, n)
    stages = _stages(table)
    try:
        series = llm_series(_scalar_of(table, n), lambda: _itl_of(table), total)
    except BadField as exc:
        raise BadBatch(str(exc)) from None
    return ParsedBatch(ts, total, error, stages, series)
