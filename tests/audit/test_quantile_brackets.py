"""Sample brackets in place of the histogram pass: still exact, checked, and falling back
to the histogram when the sample misplaces a rank."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tailbudget.audit import AuditConfig, context, quantile_brackets
from tailbudget.audit.context import Ctx
from tailbudget.audit.quantiles import Ask, exact, exact_grouped
from tailbudget.logs.engine import connect
from tailbudget.logs.table import LogTable, RowCounts
from tests.audit.test_quantiles import DISTRIBUTIONS, N

QS = (0.05, 0.4, 0.5, 0.95, 0.99)


@pytest.fixture(autouse=True)
def small_sample(monkeypatch) -> None:
    # A log of N rows then has a row sample of N / 5, as a large log has one of 250,000.
    monkeypatch.setattr(context, "SAMPLE_ROWS", N // 5)


def ctx_for(columns: dict[str, object], labels: list[str]) -> Ctx:
    backend = connect()
    backend.con.register("t", pa.table(columns))
    table = backend.table("t")
    n = table.count().execute()
    log = LogTable(table=table, stages=(), rows=RowCounts(n, n, 0), backend=backend)
    config = AuditConfig.of_e2e({"p99": 1.0}, in_memory_rows=0, progress=labels.append)
    return Ctx(log, config)


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_bracketed_quantiles_are_exact(name) -> None:
    values = DISTRIBUTIONS[name]
    labels: list[str] = []
    ctx = ctx_for({"v": values}, labels)
    got = exact(ctx, "test", [Ask("v", ctx.t["v"], QS)])["v"]
    for q, g, w in zip(QS, got, np.quantile(values, QS), strict=True):
        assert g == pytest.approx(float(w), rel=1e-12, abs=1e-12), (name, q)
    assert "test: bracket counts" in labels
    if name in ("lognormal", "bimodal cache hit/miss", "one value"):
        assert "test: histogram" not in labels, labels  # the sample placed every rank


def test_filters_expressions_and_an_empty_ask() -> None:
    v, w = DISTRIBUTIONS["lognormal"], DISTRIBUTIONS["integer ms, many ties"]
    labels: list[str] = []
    ctx = ctx_for({"v": v, "w": w}, labels)
    t = ctx.t
    got = exact(
        ctx,
        "t",
        [
            Ask("sum", t["v"] + t["w"], (0.5, 0.99)),
            Ask("warm", t["v"], (0.99,), where=t["w"] < 20),
            Ask("none", t["v"], (0.5,), where=t["w"] < 0),
        ],
    )
    assert got["none"] == [None]
    assert got["sum"] == pytest.approx(list(np.quantile(v + w, (0.5, 0.99))), rel=1e-12)
    assert got["warm"][0] == pytest.approx(float(np.quantile(v[w < 20], 0.99)), rel=1e-12)


@pytest.mark.parametrize("collect", [True, False])
def test_a_misplaced_bracket_falls_back_to_the_histogram(monkeypatch, collect) -> None:
    # Brackets a few sample ranks wide miss most wanted ranks: every miss is caught by
    # the counts or by the values read, and the histogram finds the figure instead.
    monkeypatch.setattr(quantile_brackets, "Z", 0.0)
    if not collect:
        monkeypatch.setattr(quantile_brackets, "COLLECT_SHARE", 0.0)
    values = DISTRIBUTIONS["lognormal"]
    labels: list[str] = []
    ctx = ctx_for({"v": values}, labels)
    got = exact(ctx, "t", [Ask("v", ctx.t["v"], QS)])["v"]
    assert got == pytest.approx(list(np.quantile(values, QS)), rel=1e-12)
    assert "t: histogram" in labels


@pytest.mark.parametrize("name", ["lognormal", "integer ms, many ties"])
def test_values_are_collected_by_the_counts_or_read_by_a_select(monkeypatch, name) -> None:
    # Brackets holding few values are collected by the counting pass (no select); more
    # than COLLECT_SHARE of the rows are read back by one select after it. Both give the
    # figures.
    values = DISTRIBUTIONS[name]
    want = list(np.quantile(values, QS))
    for most, select in ((1.0, False), (0.0, True)):
        monkeypatch.setattr(quantile_brackets, "COLLECT_SHARE", most)
        labels: list[str] = []
        ctx = ctx_for({"v": values}, labels)
        assert exact(ctx, "t", [Ask("v", ctx.t["v"], QS)])["v"] == pytest.approx(want, rel=1e-12)
        assert ("t: values" in labels) is select, labels
        assert "t: histogram" not in labels, labels


def test_brackets_that_would_read_too_much_are_not_tried(monkeypatch) -> None:
    monkeypatch.setattr(quantile_brackets, "MOST_VALUES", 100)
    labels: list[str] = []
    ctx = ctx_for({"v": DISTRIBUTIONS["lognormal"]}, labels)
    got = exact(ctx, "t", [Ask("v", ctx.t["v"], (0.5,))])["v"]
    assert got == pytest.approx([float(np.median(DISTRIBUTIONS["lognormal"]))], rel=1e-12)
    assert "t: bracket counts" not in labels and "t: histogram" in labels


def test_a_thinly_sampled_ask_is_read_back_whole(monkeypatch) -> None:
    monkeypatch.setattr(quantile_brackets, "MIN_SAMPLE", 10 * N)
    labels: list[str] = []
    values = DISTRIBUTIONS["integer ms, many ties"]
    ctx = ctx_for({"v": values}, labels)
    got = exact(ctx, "t", [Ask("v", ctx.t["v"], QS)])["v"]
    assert got == pytest.approx(list(np.quantile(values, QS)), rel=1e-12)
    assert "t: histogram" not in labels


GROUPS = np.where(np.arange(N) % 50 == 0, "rare", np.where(np.arange(N) % 2, "odd", "even")).astype(
    object
)


@pytest.mark.parametrize("name", ["lognormal", "integer ms, many ties", "one value"])
def test_grouped_brackets_per_value(name) -> None:
    values = DISTRIBUTIONS[name]
    labels: list[str] = []
    ctx = ctx_for({"v": values, "g": GROUPS}, labels)
    by = ctx.t["g"]
    ask = Ask("p", ctx.t["v"], (0.5, 0.99), where=by != "odd", by=by)
    got = exact_grouped(ctx, "t", [ask])["p"]
    assert set(got) == {"rare", "even"}
    for g, qs in got.items():
        want = np.quantile(values[np.equal(GROUPS, g)], (0.5, 0.99))
        assert qs == pytest.approx(list(want), rel=1e-12), g
    assert "t: histogram" not in labels, labels  # "rare" is read whole, "even" bracketed


def test_a_group_the_sample_missed_sends_its_ask_to_the_histogram() -> None:
    values = DISTRIBUTIONS["lognormal"]
    groups = GROUPS.copy()
    groups[7] = "once"  # one row: a row sample of a fifth of the log most likely misses it
    labels: list[str] = []
    ctx = ctx_for({"v": values, "g": groups}, labels)
    got = exact_grouped(ctx, "t", [Ask("p", ctx.t["v"], (0.99,), by=ctx.t["g"])])["p"]
    assert got["once"] == [pytest.approx(float(values[7]))]
    for g in ("rare", "even", "odd"):
        assert got[g] == pytest.approx([float(np.quantile(values[groups == g], 0.99))], rel=1e-12)


@pytest.mark.parametrize("n_groups", [3, quantile_brackets.MASKED_RUNS + 40])
def test_sorted_runs_per_ask_and_group(n_groups) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, 5_000).astype(np.int32)
    g = np.array([f"g{i}" for i in rng.integers(0, n_groups, 5_000)], dtype=object)
    v = rng.lognormal(3, 1, 5_000)
    runs = quantile_brackets.sorted_runs(pa.table({"_a": a, "_g": g, "_v": v}))
    keys = sorted({(int(x), str(y)) for x, y in zip(a, g, strict=True)})
    assert sorted(runs) == keys
    for i, name in keys:
        assert np.array_equal(runs[(i, name)], np.sort(v[(a == i) & (g == name)]))
