"""Exact quantiles in bounded memory (histogram, then the values of the buckets holding the
ranks) against the closed form: NumPy's linear quantile, (n - 1) * q interpolation, which
is what the engines' exact quantiles compute."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tailbudget.audit import AuditConfig, quantiles
from tailbudget.audit.context import Ctx
from tailbudget.audit.quantiles import Ask, exact, exact_grouped
from tailbudget.logs.engine import connect
from tailbudget.logs.table import LogTable, RowCounts

N = 20_000
QS = (0.0, 0.001, 0.01, 0.4, 0.5, 0.95, 0.99, 0.999, 1.0)
_rng = np.random.default_rng(3)
DISTRIBUTIONS = {
    "lognormal": _rng.lognormal(6.0, 0.8, N),
    "integer ms, many ties": np.round(_rng.lognormal(3.0, 0.4, N)),
    "zeros, negatives and positives": np.concatenate(
        [np.zeros(N // 4), -_rng.exponential(5.0, N // 4), _rng.exponential(50.0, N // 2)]
    ),
    "within one bucket": 1000.0 + _rng.normal(0.0, 1e-3, N),
    "bimodal cache hit/miss": np.where(
        _rng.random(N) < 0.15, _rng.lognormal(7.0, 0.25, N), _rng.lognormal(3.3, 0.25, N)
    ),
    "one value": np.full(N, 42.0),
}


def ctx_for(columns: dict[str, object], in_memory_rows: int = 0) -> Ctx:
    backend = connect()
    backend.con.register("t", pa.table(columns))
    table = backend.table("t")
    n = table.count().execute()
    log = LogTable(table=table, stages=(), rows=RowCounts(n, n, 0), backend=backend)
    return Ctx(log, AuditConfig.of_e2e({"p99": 1.0}, in_memory_rows=in_memory_rows))


@pytest.fixture(params=[500_000, 200], ids=["buckets read whole", "buckets split first"])
def pull_rows(request, monkeypatch) -> int:
    monkeypatch.setattr(quantiles, "PULL_ROWS", request.param)
    return int(request.param)


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_two_pass_quantiles_are_exact(name, pull_rows) -> None:
    values = DISTRIBUTIONS[name]
    ctx = ctx_for({"v": values})
    got = exact(ctx, "test", [Ask("v", ctx.t["v"], QS)])["v"]
    want = np.quantile(values, QS)
    for q, g, w in zip(QS, got, want, strict=True):
        assert g == pytest.approx(float(w), rel=1e-12, abs=1e-12), (name, q)


def test_two_pass_equals_the_engine_quantile_with_filters_and_expressions() -> None:
    values = DISTRIBUTIONS["lognormal"]
    other = DISTRIBUTIONS["integer ms, many ties"]
    cols = {"v": values, "w": other}
    asks = lambda c: [  # noqa: E731
        Ask("sum", c.t["v"] + c.t["w"], (0.5, 0.99)),
        Ask("warm", c.t["v"], (0.99,), where=c.t["w"] < 20),
        Ask("none", c.t["v"], (0.5,), where=c.t["w"] < 0),
    ]
    bounded = ctx_for(cols)
    engine = ctx_for(cols, in_memory_rows=10 * N)
    a = exact(bounded, "t", asks(bounded))
    b = exact(engine, "t", asks(engine))
    assert a["none"] == b["none"] == [None]
    for key in ("sum", "warm"):
        assert a[key] == pytest.approx(b[key], rel=1e-12)
    assert b["warm"][0] == pytest.approx(float(np.quantile(values[other < 20], 0.99)), rel=1e-12)


def test_grouped_quantiles_per_value(pull_rows) -> None:
    values = DISTRIBUTIONS["bimodal cache hit/miss"]
    group = np.where(np.arange(N) % 10 == 0, "rare", np.where(np.arange(N) % 2, "odd", "even"))
    ctx = ctx_for({"v": values, "g": group})
    by = ctx.t["g"]
    ask = Ask("p", ctx.t["v"], (0.5, 0.99), where=by != "odd", by=by)
    got = exact_grouped(ctx, "t", [ask])["p"]
    assert set(got) == {"rare", "even"}
    for g, qs in got.items():
        want = np.quantile(values[group == g], (0.5, 0.99))
        assert qs == pytest.approx(list(want), rel=1e-12)


def test_method_is_named_in_the_provenance() -> None:
    small = ctx_for({"v": DISTRIBUTIONS["lognormal"]}, in_memory_rows=N)
    large = ctx_for({"v": DISTRIBUTIONS["lognormal"]}, in_memory_rows=N - 1)
    assert "the engine's quantile over every value" in quantiles.method_note(small)
    assert "bounded memory" in quantiles.method_note(large)
    assert "0.5%-wide log buckets" in quantiles.method_note(large)
