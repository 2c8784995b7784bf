"""Columnar flattening of a batch: records of one shape become whole columns at once.

Most requests of a service share a shape: the same stages in the same order,
the same covariate names, no error. The writer turns such records into
columns with C-level builtins and NumPy, one operation per column rather than
a Python loop per value, and each sink renders the columns its own way (JSON
lines joined from per-column encodings, Arrow arrays, or dicts). Anything
else - an error, a degraded stage, a stream, a repeated or late stage, a
covariate that clashes with a recorder column - keeps the checked per-row
path in `record.to_rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import orjson

from tailbudget.measure.record import RESERVED, STAGE_WIDTH, column_of, utc_second

if TYPE_CHECKING:
    import pyarrow as pa

_names = itemgetter(slice(0, None, STAGE_WIDTH))

MAX_SHAPES = 16
"""Shapes per batch given the columnar path; rarer shapes in a batch go row by row."""

Dumps = Callable[[Any], bytes]


@dataclass(frozen=True, slots=True)
class Block:
    """Records of one shape as columns."""

    positions: list[int]
    """Where the block's records sit in the batch."""
    ids: Sequence[int | str]
    """Request ids: sequence numbers (written as prefix + number) or given strings."""
    prefix: str
    start_ns: npt.NDArray[np.int64]
    """Epoch ns of each request's start (int64 array)."""
    total_ms: npt.NDArray[np.float64]
    """float64 array."""
    stage_cols: tuple[str, ...]
    durations: npt.NDArray[np.float64]
    """float64 array, one row per stage column."""
    counted: tuple[str, ...]
    """`<stage>_count` columns (always 1 here: a repeated stage takes the row path)."""
    field_keys: tuple[str, ...]
    fields: list[list[object]]
    """One list per covariate."""

    @property
    def names(self) -> tuple[str, ...]:
        """Column names in row order."""
        return ("request_id", "ts", "total_ms", "error", *self.stage_cols, *self.counted,
                *self.field_keys)  # fmt: skip

    def _int_ids(self) -> bool:
        return list(map(type, self.ids)).count(int) == len(self.ids)

    def id_strings(self) -> list[str]:
        """Request ids as written to the log."""
        if self._int_ids():
            return list(map(self.prefix.__add__, map(str, self.ids)))
        return [f"{self.prefix}{i}" if isinstance(i, int) else str(i) for i in self.ids]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per record, `ts` as ISO-8601 UTC text."""
        m = len(self.ids)
        cols: list[Any] = [
            self.id_strings(),
            iso_utc(self.start_ns),
            self.total_ms.tolist(),
            [False] * m,
            *self.durations.tolist(),
            *([1] * m for _ in self.counted),
            *self.fields,
        ]
        return list(map(dict, map(zip, repeat(self.names), zip(*cols, strict=True))))

    def _json_pieces(self, dumps: Dumps, end: bytes) -> list[Any]:
        # Each column is encoded by one `dumps` call and split on commas (kept
        # only when that gives one piece per value, i.e. no value's text holds
        # a comma); constant text folds into the separators between columns.
        pieces: list[Any] = []
        if self._int_ids() and dumps(self.prefix)[1:-1] == self.prefix.encode():
            head = b'{"request_id":"' + self.prefix.encode()
            pieces += [repeat(head), _json_values(self.ids, dumps)]
            sep = b'","ts":"'
        else:
            pieces += [repeat(b'{"request_id":'), _json_values(self.id_strings(), dumps)]
            sep = b',"ts":"'
        heads, fraction = _iso_parts(self.start_ns, dumps)
        if isinstance(heads, bytes):
            pieces += [repeat(sep + heads), fraction]
        else:
            pieces += [repeat(sep), heads, fraction]
        pieces += [repeat(b'Z","total_ms":'), _json_values(self.total_ms, dumps)]
        tail = b',"error":false'
        for col, values in zip(self.stage_cols, self.durations, strict=True):
            pieces += [repeat(tail + b"," + dumps(col) + b":"), _json_values(values, dumps)]
            tail = b""
        tail += b"".join(b"," + dumps(c) + b":1" for c in self.counted)
        for key, values in zip(self.field_keys, self.fields, strict=True):
            pieces += [repeat(tail + b"," + dumps(key) + b":"), _json_values(values, dumps)]
            tail = b""
        pieces.append(repeat(tail + end))
        return pieces

    def json_lines(self, dumps: Dumps) -> list[bytes]:
        """One JSON object per record (no newline), keys in row order, `ts` as ISO text."""
        # `repeat` pieces are endless: the value columns end the rows.
        return list(map(b"".join, zip(*self._json_pieces(dumps, b"}"), strict=False)))

    def jsonl(self, dumps: Dumps) -> bytes:
        """The block as JSON Lines text, each line ending in a newline."""
        rows = zip(*self._json_pieces(dumps, b"}\n"), strict=False)
        return b"".join(chain.from_iterable(rows))

    def arrow(self) -> pa.Table:
        """The block as a `pyarrow.Table` (ts as timestamp[us, UTC])."""
        # A start-up guard: pyarrow loads on first use, not with this module.
        import pyarrow as pa
        import pyarrow.compute as pc

        m = len(self.ids)
        if self._int_ids():
            digits = pa.array(self.ids, pa.int64()).cast(pa.string())
            ids = pc.binary_join_element_wise(self.prefix, digits, "")
        else:
            ids = pa.array(self.id_strings(), pa.string())
        cols: dict[str, Any] = {
            "request_id": ids,
            "ts": pa.array(self.start_ns // 1000, pa.timestamp("us", tz="UTC")),
            "total_ms": pa.array(self.total_ms),
            "error": pa.array(np.zeros(m, dtype=bool)),
        }
        for col, values in zip(self.stage_cols, self.durations, strict=True):
            cols[col] = pa.array(values)
        for col in self.counted:
            cols[col] = pa.array(np.ones(m, dtype=np.int64))
        for key, values in zip(self.field_keys, self.fields, strict=True):
            cols[key] = arrow_array(values)
        return pa.table(cols)


def arrow_array(values: Sequence[object]) -> pa.Array:
    """An Arrow array of a covariate column; mixed types are kept as text."""
    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values])


def _json_values(col: Any, dumps: Dumps) -> list[bytes]:
    n = len(col)
    try:
        if isinstance(col, np.ndarray):  # floats: encoded straight from the array
            text = orjson.dumps(col, option=orjson.OPT_SERIALIZE_NUMPY)
        else:
            text = dumps(col)
    except TypeError:  # a value the encoder refuses: encode one by one to find it
        return list(map(dumps, col))
    parts = text[1:-1].split(b",")
    if len(parts) == n and n:
        return parts
    return list(map(dumps, col))


def _iso_parts(
    epoch_ns: npt.NDArray[np.int64], dumps: Dumps
) -> tuple[bytes | list[bytes], list[bytes]]:
    """ISO-8601 UTC as (date-time prefix up to the seconds' dot, 6-digit microseconds).

    The prefix is formatted once per distinct second (one `bytes` when the
    whole block falls in one second). Microseconds are encoded in bulk with a
    leading 1 that keeps their zero padding (every value then has 7 digits),
    and that 1 is cut from the whole text at once.
    """
    ns = np.asarray(epoch_ns, dtype=np.int64)
    secs = ns // 1_000_000_000
    micro = (ns - secs * 1_000_000_000) // 1000 + 1_000_000
    fraction = dumps(micro.tolist())[2:-1].replace(b",1", b",").split(b",")
    lo, hi = int(secs.min()), int(secs.max())
    if lo == hi:
        return _second(lo), fraction
    heads = {s: _second(s) for s in range(lo, hi + 1)} if hi - lo < 64 else {}
    return [heads.get(s) or _second(s) for s in secs.tolist()], fraction


def _second(sec: int) -> bytes:
    return utc_second(sec).encode() + b"."


def iso_utc(epoch_ns: npt.NDArray[np.int64]) -> list[str]:
    """Epoch ns (int64 array) -> ISO-8601 UTC text with microseconds and a `Z`."""
    found, fraction = _iso_parts(epoch_ns, orjson.dumps)
    heads = repeat(found) if isinstance(found, bytes) else found
    return [(h + f).decode() + "Z" for h, f in zip(heads, fraction, strict=False)]


def blocks(
    records: Sequence[tuple[Any, ...]], wall_offset_ns: int, prefix: str, repeated: set[str]
) -> tuple[list[Block], list[int]]:
    """Blocks of same-shape records, and the positions left for the per-row path.

    `records` are tuples in `Record` field order; `wall_offset_ns` maps a
    perf_counter_ns stamp to epoch ns; `repeated` names stages that ever
    repeated (they get a `<stage>_count` column).
    """
    m = len(records)
    if m == 0:
        return [], []
    try:
        # One transposition, then whole-column checks: the usual batch is one shape.
        cols = list(zip(*records, strict=True))
        stages, errors, fields, extras = cols[3], cols[4], cols[5], cols[6]
        uniform = (
            errors.count(None) == m
            and extras.count(None) == m
            and list(map(len, stages)).count(len(stages[0])) == m
            and list(map(len, fields)).count(len(fields[0])) == m
        )
        if uniform:
            block = _block(list(range(m)), cols, _names(stages[0]), tuple(fields[0]),
                           wall_offset_ns, prefix, repeated)  # fmt: skip
            if block is not None:
                return [block], []
    except (TypeError, ValueError, AttributeError, IndexError):  # not what requests make
        return [], list(range(m))
    groups: dict[Any, list[int]] = {}
    rest: list[int] = []
    for i, r in enumerate(records):
        try:
            if r[4] is None and r[6] is None:
                key = (_names(r[3]), tuple(r[5]))
                if key in groups or len(groups) < MAX_SHAPES:
                    groups.setdefault(key, []).append(i)
                    continue
        except (TypeError, IndexError):  # an unhashable stage name, a malformed record
            pass
        rest.append(i)
    out: list[Block] = []
    for (shape, field_keys), positions in groups.items():
        sub = list(zip(*[records[i] for i in positions], strict=True))
        block = _block(positions, sub, shape, field_keys, wall_offset_ns, prefix, repeated)
        if block is None:
            rest.extend(positions)
        else:
            out.append(block)
    rest.sort()
    return out, rest


def _block(
    positions: list[int],
    cols: list[tuple[Any, ...]],
    shape: tuple[Any, ...],
    field_keys: tuple[str, ...],
    wall_offset_ns: int,
    prefix: str,
    repeated: set[str],
) -> Block | None:
    """Columns for records transposed into `cols` (one tuple per `Record` field) sharing
    stage names `shape` and covariates `field_keys`; None when they need the row path."""
    k = len(shape)
    ids, starts_, ends_, stages, _, fields, _ = cols
    if len(set(shape)) != k or not all(isinstance(n, str) for n in shape):
        return None  # a repeated stage sums per row; a malformed one is logged there
    stage_cols = tuple(column_of(n) for n in shape)
    if not RESERVED.isdisjoint(field_keys) or not set(stage_cols).isdisjoint(field_keys):
        return None  # the recorder's own columns win: the row path skips the covariate
    m = len(ids)
    try:
        per_stage = list(zip(*stages, strict=True))  # name, t0, t1 of each stage: m values each
        if any(per_stage[3 * j].count(name) != m for j, name in enumerate(shape)):
            return None
        starts = np.array(starts_, dtype=np.int64)
        ends = np.array(ends_, dtype=np.int64)
        t0 = np.array(per_stage[1::STAGE_WIDTH], dtype=np.int64).reshape(k, m)
        t1 = np.array(per_stage[2::STAGE_WIDTH], dtype=np.int64).reshape(k, m)
        # Equal lengths and every key present: the same covariates in every record.
        field_cols = [list(map(itemgetter(key), fields)) for key in field_keys]
    except (TypeError, ValueError, OverflowError, KeyError):
        return None  # a stamp that is not an int, a missing key: the row path sorts it out
    if k and bool((t1 > ends).any()):
        return None  # a stage that ended after its request: dropped, with a warning
    return Block(
        positions=positions,
        ids=ids,
        prefix=prefix,
        start_ns=starts + wall_offset_ns,
        total_ms=np.maximum(ends - starts, 0) / 1e6,
        stage_cols=stage_cols,
        # Negative durations (a clock misuse) are clamped to 0, as on the row path.
        durations=np.maximum(t1 - t0, 0) / 1e6,
        counted=tuple(f"{n}_count" for n in shape if n in repeated),
        field_keys=field_keys,
        fields=field_cols,
    )
