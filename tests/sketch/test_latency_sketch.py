"""LatencySketch: accuracy on named distributions, merge, serialization, size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailbudget.errors import TailbudgetError
from tailbudget.sketch import LatencySketch

QS = (0.5, 0.95, 0.99, 0.999)
N = 200_000


def _dist(name: str, rng: np.random.Generator) -> np.ndarray:
    if name == "lognormal":
        return rng.lognormal(5.0, 1.0, N)
    if name == "pareto":
        return (rng.pareto(1.5, N) + 1.0) * 50.0
    if name == "exponential":
        return rng.exponential(300.0, N)
    if name == "uniform":
        return rng.uniform(10.0, 2000.0, N)
    if name == "bimodal":
        fast = rng.normal(120.0, 15.0, N * 9 // 10)
        slow = rng.normal(2500.0, 300.0, N - fast.size)
        return np.abs(np.concatenate([fast, slow]))
    raise AssertionError(name)


@pytest.mark.parametrize("dist", ["lognormal", "pareto", "exponential", "uniform", "bimodal"])
def test_relative_error_within_accuracy(dist: str) -> None:
    x = _dist(dist, np.random.default_rng(7))
    sketch = LatencySketch(0.01)
    sketch.add_many(x)
    exact = np.quantile(x, QS, method="lower")
    got = np.array(sketch.quantiles(QS), dtype=float)
    rel = np.abs(got - exact) / exact
    # float32 binning may shift a value at a bucket edge by one bucket: 1e-5 slack
    assert np.all(rel <= 0.01 * (1 + 1e-4)), dict(zip(QS, rel, strict=True))
    assert sketch.count == N


def test_coarser_accuracy_is_coarser_but_bounded() -> None:
    x = _dist("lognormal", np.random.default_rng(1))
    fine, coarse = LatencySketch(0.005), LatencySketch(0.05)
    fine.add_many(x)
    coarse.add_many(x)
    exact = np.quantile(x, QS, method="lower")
    err_fine = np.abs(np.array(fine.quantiles(QS)) - exact) / exact
    err_coarse = np.abs(np.array(coarse.quantiles(QS)) - exact) / exact
    assert np.all(err_fine <= 0.005 * (1 + 1e-4))
    assert np.all(err_coarse <= 0.05 * (1 + 1e-4))
    assert len(coarse.to_bytes()) < len(fine.to_bytes())


def test_scalar_add_agrees_with_batch() -> None:
    x = np.random.default_rng(3).lognormal(4.0, 1.5, 5000)
    one, many = LatencySketch(), LatencySketch()
    for v in x:
        one.add(float(v))
    many.add_many(x)
    assert one.count == many.count == x.size
    for a, b in zip(one.quantiles(QS), many.quantiles(QS), strict=True):
        assert a is not None and b is not None
        assert abs(a - b) / b <= 0.021  # at most one bucket apart


def test_merge_of_halves_equals_whole() -> None:
    x = np.random.default_rng(11).pareto(1.2, 100_000) * 30 + 1
    whole, a, b = LatencySketch(), LatencySketch(), LatencySketch()
    whole.add_many(x)
    a.add_many(x[: x.size // 2])
    b.add_many(x[x.size // 2 :])
    a.merge(b)
    assert a.count == whole.count
    assert a.quantiles(QS) == whole.quantiles(QS)
    assert a.to_bytes()[76:] == whole.to_bytes()[76:]  # same buckets (sum may round)
    assert a.min == whole.min and a.max == whole.max


def test_merge_rejects_other_settings() -> None:
    with pytest.raises(TailbudgetError, match="different settings"):
        LatencySketch(0.01).merge(LatencySketch(0.02))


def test_zero_negative_nan_inf() -> None:
    s = LatencySketch()
    added = s.add_many(np.array([0.0, -5.0, np.nan, 10.0, np.inf]))
    assert added == 4 and s.count == 4
    assert s.clamped == 3  # 0, -5 and inf fall outside [min_value, max_value]
    assert not s.add(float("nan"))
    assert s.add(-1.0)
    assert s.quantile(0.0) == pytest.approx(s.min_value)
    assert s.quantile(1.0) == pytest.approx(s.max_value)


def test_empty_sketch() -> None:
    s = LatencySketch()
    assert s.count == 0 and s.quantile(0.99) is None and s.min is None
    assert LatencySketch.from_bytes(s.to_bytes()).count == 0


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_bad_accuracy(bad: float) -> None:
    with pytest.raises(TailbudgetError, match="relative_accuracy must be in"):
        LatencySketch(bad)


def test_bad_quantile() -> None:
    s = LatencySketch()
    s.add(1.0)
    with pytest.raises(TailbudgetError, match=r"in \[0, 1\]"):
        s.quantile(1.5)


def test_size_bound_over_whole_range() -> None:
    # values spread over the full clamp range: the worst case for the store
    x = np.geomspace(1e-6, 1e9, 400_000)
    s = LatencySketch(0.01)
    s.add_many(np.random.default_rng(0).permutation(x) * 1.0)
    s.add_many(np.full(1000, 7.0))
    assert len(s.to_bytes()) <= 32 * 1024


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False),
        max_size=300,
    ),
    st.sampled_from([0.005, 0.01, 0.02]),
)
def test_bytes_round_trip(values: list[float], accuracy: float) -> None:
    s = LatencySketch(accuracy)
    s.add_many(np.array(values, dtype=float))
    back = LatencySketch.from_bytes(s.to_bytes())
    assert back == s
    assert back.count == len(values)
    assert back.quantiles(QS) == s.quantiles(QS)
    assert back.relative_accuracy == accuracy


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_bytes_raise_clean_error(data: bytes) -> None:
    with pytest.raises(TailbudgetError):
        LatencySketch.from_bytes(b"TBS1" + data)


def test_truncated_bytes_raise() -> None:
    s = LatencySketch()
    s.add_many(np.arange(1, 1000, dtype=float))
    raw = s.to_bytes()
    with pytest.raises(TailbudgetError):
        LatencySketch.from_bytes(raw[:-3])
    with pytest.raises(TailbudgetError, match="bad header"):
        LatencySketch.from_bytes(b"nope")


def test_merged_many_equals_sequential_merge() -> None:
    rng = np.random.default_rng(5)
    parts = [rng.lognormal(m, 1.0, 2000) for m in (2.0, 5.0, 8.0)]
    sketches = []
    for p in parts:
        s = LatencySketch()
        s.add_many(p)
        sketches.append(s)
    seq = LatencySketch()
    for s in sketches:
        seq.merge(s)
    assert LatencySketch.merged([*sketches, LatencySketch()]) == seq
    assert LatencySketch.merged([]).count == 0
    with pytest.raises(TailbudgetError, match="different settings"):
        LatencySketch.merged([sketches[0], LatencySketch(0.05)])


def test_crafted_header_out_of_range_is_rejected() -> None:
    import struct

    s = LatencySketch()
    s.add_many(np.array([1.0, 2.0, 3.0]))
    raw = bytearray(s.to_bytes())
    # header: magic, 6 doubles (accuracy, min_value, max_value, min, max, sum), then
    # count, clamped and the zigzagged bucket offset (int64 at byte 68): move it far away
    struct.pack_into("<q", raw, 68, 2 * 10**15)
    with pytest.raises(TailbudgetError, match="outside the sketch's value range"):
        LatencySketch.from_bytes(bytes(raw))
    raw = bytearray(s.to_bytes())
    struct.pack_into("<d", raw, 28, float("nan"))  # min
    with pytest.raises(TailbudgetError):
        LatencySketch.from_bytes(bytes(raw))
