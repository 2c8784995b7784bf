"""Arrow columns read into NumPy from their buffers match pyarrow's own reading."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from tailbudget._arrow_numpy import bools, floats, ints

_floats = st.lists(st.one_of(st.none(), st.floats(allow_nan=False, width=64)), max_size=40)
_cuts = st.tuples(st.integers(0, 5), st.integers(0, 5))


def _chunked(values: list, typ: pa.DataType, cuts: tuple[int, int]) -> pa.ChunkedArray:
    """The values as several chunks, the first of them a slice (an offset into a buffer)."""
    a, b = sorted(min(c, len(values)) for c in cuts)
    head = pa.array([None, *values[:a]], type=typ).slice(1)
    return pa.chunked_array([head, pa.array(values[a:b], type=typ), pa.array(values[b:], type=typ)])


@given(_floats, _cuts)
def test_floats_are_pyarrows_values_with_nan_for_null(values, cuts) -> None:
    for typ in (pa.float64(), pa.float32()):
        column = _chunked(values, typ, cuts)
        got = floats(column)
        want = [math.nan if v is None else v for v in column.to_pylist()]
        np.testing.assert_array_equal(got, np.array(want, dtype=np.float64))


@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40), _cuts)
def test_ints_are_pyarrows_values(values, cuts) -> None:
    for typ in (pa.int32(), pa.int64(), pa.int8()):
        small = [v % 100 for v in values] if typ == pa.int8() else values
        column = _chunked(small, typ, cuts)
        assert ints(column).tolist() == column.to_pylist()


@given(st.lists(st.one_of(st.none(), st.booleans()), max_size=40), _cuts)
def test_bools_are_pyarrows_values_with_false_for_null(values, cuts) -> None:
    column = _chunked(values, pa.bool_(), cuts)
    assert bools(column).tolist() == [bool(v) for v in column.to_pylist()]


def test_an_empty_column_reads_as_an_empty_array() -> None:
    assert floats(pa.chunked_array([], type=pa.float64())).shape == (0,)
    assert ints(pa.chunked_array([], type=pa.int64())).shape == (0,)
