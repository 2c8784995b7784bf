"""Arrow bodies: an Arrow IPC stream (`Content-Type: application/vnd.apache.arrow.stream`).

The columns are those of the columnar JSON body (`columns_body`), typed:

- `total_ms` (required), `ttft_ms`, `tpot_ms`, `itl_p50_ms`, `itl_p99_ms`:
  integer or floating point milliseconds;
- `output_tokens`: an integer column (or floating point holding whole numbers);
- `ts`: epoch seconds (integer or floating point), or a timestamp with a time zone;
- `error`: boolean (or integer 0/1);
- `itl_ms`: a list of numbers per observation, every inter-token gap;
- `stages`: a struct with one numeric field per stage name;
- `class`: the request's class (`classes:` in the budget), a string column
  (dictionary-encoded or not); null is an observation without a class.

A null is an absent value, as `null` is in JSON (a null `ts` is when the server
received the batch). Other columns are ignored. The values are checked by the
rules of the JSON bodies, with the same one-line errors naming the item; no
value becomes a Python object, which is why a client sending at volume (or a
sidecar holding a pyarrow table already) should prefer this form.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tailbudget._arrow_numpy import bits, floats, valid_mask
from tailbudget.control.columns import StageColumn
from tailbudget.serve.arrow_size import ipc_size
from tailbudget.serve.batch import (
    MAX_BATCH,
    BadBatch,
    BatchTooLarge,
    _check_stage_name,
)
from tailbudget.serve.batch import (
    Batch as ParsedBatch,
)
from tailbudget.serve.columns_body import (
    checked_stage,
    checked_stamps,
    checked_totals,
)
from tailbudget.serve.limits import MAX_ITL_GAPS, BodyLimits
from tailbudget.serve.llm_fields import (
    LLM_KEYS,
    BadField,
    Scalar,
    llm_series,
    too_many_gaps,
    vouched,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ARROW_STREAM", "parse_arrow"]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
"""The media type of an Arrow IPC stream (IANA registered)."""

DEFAULT_LIMITS = BodyLimits()

_SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _declared(body: bytes, limits: BodyLimits) -> None:
    """Refuse a stream on the sizes it declares, before pyarrow decodes (and
    decompresses) any of it."""
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    try:
        size = ipc_size(body)
    except (pa.ArrowException, OSError, ValueError, IndexError, struct.error) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadBatch(
            f"body is not a valid Arrow IPC stream ({first}); "
            f"send pyarrow.ipc.new_stream output as {ARROW_STREAM}"
        ) from None
    if size.decoded_bytes > limits.max_decoded_bytes:
        raise BatchTooLarge(str(limits.decoded_over(size.decoded_bytes, "the Arrow body")))
    if size.rows > MAX_BATCH:
        raise BadBatch(f"{size.rows} observations in one request; send at most {MAX_BATCH}")
    if size.elements > limits.max_decoded_bytes // 8:
        # Arrays of nulls hold no buffers; their lengths are still what gets allocated.
        raise BatchTooLarge(str(limits.decoded_over(8 * size.elements, "the Arrow body's arrays")))


def _table(body: bytes, limits: BodyLimits) -> pa.Table:
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    _declared(body, limits)
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
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    t = arr.type
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    return str(t)


Columns = dict[str, "pa.Array"]
"""The columns a batch reads, by name, each as one array."""

_KNOWN = frozenset({"total_ms", "ts", "error", "stages", "itl_ms", "class", *LLM_KEYS})


def _columns(table: pa.Table) -> Columns:
    """The known columns of `table` (others are ignored); one chunk is taken as it is."""
    out: Columns = {}
    for name, chunked in zip(table.column_names, table.columns, strict=True):
        if name not in _KNOWN:
            continue
        if name in out:
            raise BadBatch(f"column {name} appears more than once in the Arrow body; send it once")
        out[name] = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
    return out


def _numbers(
    cols: Columns, key: str, want: str
) -> tuple[npt.NDArray[np.float64], Any, bool] | None:
    """A numeric column as float64 (NaN where null), its present mask (None: no nulls)
    and whether it is an integer column; None when absent or every value is null."""
    arr = cols.get(key)
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
    """A numeric array as float64 (NaN where null) and its present mask (None: no
    nulls). Read from the Arrow buffers with NumPy: pyarrow's `to_numpy` would import
    pandas (tens of MiB the server otherwise never loads)."""
    return floats(arr), valid_mask(arr)


def _scalar_of(cols: Columns, n: int) -> Scalar:
    def scalar(key: str) -> tuple[npt.NDArray[np.float64] | None, Any]:
        got = _numbers(cols, key, "numbers")
        if got is None:
            return None, np.zeros(n, dtype=bool)
        values, present, whole = got
        return vouched(values, present, key, whole, lambda i: f"{values[i]:g}")

    return scalar


def _itl_of(cols: Columns) -> dict[str, StageColumn]:
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = cols.get("itl_ms")
    if arr is None or pa.types.is_null(arr.type) or arr.null_count == len(arr):
        return {}
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise BadBatch(f"column itl_ms must be a list of gaps (ms) each, got an Arrow {arr.type}")
    gaps = arr.flatten()  # the gaps of the non-null lists, in row order
    if _kind(gaps) not in ("int", "float"):
        raise BadBatch(f"column itl_ms must hold numbers (ms), got lists of {gaps.type}")
    lengths, _ = _as_float(pc.list_value_length(arr))
    lengths[np.isnan(lengths)] = 0  # a null list: no gaps
    if lengths.size and lengths.max() > MAX_ITL_GAPS:
        i = int(np.argmax(lengths))
        raise BadBatch(too_many_gaps(i, int(lengths[i])))
    rows = np.repeat(np.arange(len(arr), dtype=np.int64), lengths.astype(np.int64))
    ms, present = _as_float(gaps)
    bad = ~((ms >= 0) & (ms < np.inf))
    if present is not None:
        bad |= ~present  # a null gap is not a gap
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise BadBatch(f"item {rows[k]}: itl_ms gaps must be numbers >= 0, got {ms[k]:g}")
    return {"itl": StageColumn(rows, ms)} if ms.size else {}


def _stamps(cols: Columns, n: int, now_s: float) -> npt.NDArray[np.float64]:
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = cols.get("ts")
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
    elif (kind := _kind(arr)) == "null":
        return np.full(n, now_s)
    elif kind in ("int", "float"):
        values, present = _as_float(arr)
    else:
        raise BadBatch(f"column ts must be epoch seconds or a timestamp, got an Arrow {arr.type}")
    if present is not None:
        values[~present] = now_s  # null: received now
    return checked_stamps(values, now_s, lambda i: f"{values[i]:g}")


def _errors(cols: Columns, n: int) -> npt.NDArray[np.bool_]:
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    arr = cols.get("error")
    if arr is None:
        return np.zeros(n, dtype=bool)
    if pa.types.is_boolean(arr.type):
        flags = bits(arr.buffers()[1], arr.offset, len(arr))
        valid = valid_mask(arr)
        return flags if valid is None else flags & valid  # null: no error, as in JSON
    kind = _kind(arr)
    if kind == "null":
        return np.zeros(n, dtype=bool)
    if kind != "int":
        raise BadBatch(f"column error must be boolean (or 0/1), got an Arrow {arr.type}")
    values, present = _as_float(arr)
    if present is not None:
        values[~present] = 0.0  # null: no error, as in JSON
    bad = (values != 0) & (values != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadBatch(f"item {i}: error must be true/false or 0/1, got {values[i]:g}")
    return np.asarray(values == 1, dtype=bool)


def _stages(cols: Columns) -> dict[str, StageColumn]:
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    arr = cols.get("stages")
    if arr is None:
        return {}
    if not pa.types.is_struct(arr.type):
        raise BadBatch(
            f"column stages must be a struct of one numeric field per stage, got {arr.type}"
        )
    out: dict[str, StageColumn] = {}
    # flatten() gives each field with the struct's nulls applied: a null struct is an
    # observation without stage times. A name past MAX_STAGES is refused by its check.
    for k, (field, child) in enumerate(zip(arr.type, arr.flatten(), strict=True)):
        _check_stage_name(0, field.name, k)
        column = _stage(field.name, child)
        if column is not None:
            out[field.name] = column
    return out


def _stage(name: str, child: pa.Array) -> StageColumn | None:
    kind = _kind(child)
    if kind == "null":
        return None
    if kind not in ("int", "float"):
        raise BadBatch(f"stages.{name} must be numbers (ms), got an Arrow {child.type}")
    ms, present = _as_float(child)
    return checked_stage(name, ms, present, lambda i: f"{ms[i]:g}")


def parse_arrow(body: bytes, *, now_s: float, limits: BodyLimits = DEFAULT_LIMITS) -> ParsedBatch:
    """Validate an Arrow IPC stream body, or raise BadBatch with a one-line reason
    (TooLarge, a 413, when it declares more than `limits` allow)."""
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    table = _table(body, limits)
    try:
        return _batch(table, now_s)
    except BadBatch:
        raise
    except UnicodeDecodeError:  # a forged column or field name
        raise BadBatch("a column or field name in the Arrow body is not UTF-8") from None
    except (pa.ArrowException, ValueError) as exc:  # a forged buffer validation let through
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadBatch(f"the Arrow body cannot be read as observations ({first})") from None


def _batch(table: pa.Table, now_s: float) -> ParsedBatch:
    n = table.num_rows
    cols = _columns(table)
    if "total_ms" not in cols:
        names = ", ".join(table.column_names[:8]) or "none"
        raise BadBatch(f"the Arrow body has no total_ms column (columns: {names})")
    if n == 0:
        raise BadBatch("no observations in the body")
    if n > MAX_BATCH:
        raise BadBatch(f"{n} observations in one request; send at most {MAX_BATCH}")
    got = _numbers(cols, "total_ms", "milliseconds (numbers)")
    if got is None or got[1] is not None:
        i = 0 if got is None else int(np.flatnonzero(~got[1])[0])
        raise BadBatch(f"item {i}: total_ms must be a number >= 0 (milliseconds), got null")
    values = got[0]
    total = checked_totals(values, lambda i: f"{values[i]:g}")
    ts = _stamps(cols, n, now_s)
    error = _errors(cols, n)
    stages = _stages(cols)
    try:
        series = llm_series(_scalar_of(cols, n), lambda: _itl_of(cols), total)
    except BadField as exc:
        raise BadBatch(str(exc)) from None
    return ParsedBatch(ts, total, error, stages, series, _labels(cols))


def _labels(cols: Columns) -> list[str | None] | None:
    """The `class` column as text per observation (None where null); None when absent."""
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    arr = cols.get("class")
    if arr is None or arr.null_count == len(arr):
        return None
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        raise BadBatch(
            f"column class must be strings (the request's class, e.g. premium), "
            f"got an Arrow {arr.type} column"
        )
    labels: list[str | None] = arr.to_pylist()
    return labels
