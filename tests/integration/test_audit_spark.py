"""The same log audited on DuckDB and on PySpark (local[2]) gives the same findings."""

from __future__ import annotations

import pytest

from tailbudget.audit import AuditConfig, run_audit
from tailbudget.audit.events import read_events
from tailbudget.demo.generate import generate
from tailbudget.logs import ReadOptions, read_log

pytestmark = pytest.mark.integration
pytest.importorskip("pyspark")

# One covariate and one cohort: each Spark pass costs seconds of planning, not of rows.
OPTIONS = ReadOptions(
    timestamp="ts", shape=("output_tokens",), cohorts=("model_variant",), error="error"
)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    data = generate(tmp_path_factory.mktemp("spark"), rows=20_000, seed=11)
    config = AuditConfig.of_e2e(
        {"p50": 1300.0, "p95": 2800.0, "p99": 4000.0}, events=read_events(data.events)
    )
    duck = run_audit(read_log(str(data.log), OPTIONS), config)
    spark = run_audit(read_log(str(data.log), OPTIONS, engine="pyspark"), config)
    return duck, spark


def test_same_driver_and_hypotheses(reports) -> None:
    duck, spark = reports
    assert spark.provenance.engine == "pyspark" and duck.provenance.engine == "duckdb"
    assert duck.tail.driver == spark.tail.driver == "llm"
    assert [(h.kind, h.stage) for h in duck.hypotheses] == [
        (h.kind, h.stage) for h in spark.hypotheses
    ]
    assert {h.kind for h in duck.hypotheses} >= {"cold_start", "cache_miss", "external_dependency"}
    assert duck.recommendation.choice == spark.recommendation.choice
    assert [f.fix for f in duck.ranking] == [f.fix for f in spark.ranking]


def test_percentiles_within_one_percent(reports) -> None:
    duck, spark = reports
    assert duck.snapshot.count == spark.snapshot.count
    for p in ("p50", "p95", "p99"):
        assert getattr(spark.snapshot, p) == pytest.approx(getattr(duck.snapshot, p), rel=0.01)
    assert [s.name for s in duck.stages] == [s.name for s in spark.stages]
    for a, b in zip(duck.stages, spark.stages, strict=True):
        for p in ("p50", "p95", "p99"):
            assert getattr(b, p) == pytest.approx(getattr(a, p), rel=0.01, abs=0.5)
    assert spark.cold_start is not None and duck.cold_start is not None
    assert spark.cold_start.verdict == duck.cold_start.verdict
    assert spark.cold_start.filtered_p99 == pytest.approx(duck.cold_start.filtered_p99, rel=0.01)
    for a, b in zip(duck.tail.deltas, spark.tail.deltas, strict=True):
        assert (a.stage, b.delta) == (b.stage, pytest.approx(a.delta, rel=0.01, abs=0.5))


def test_bounded_percentiles_on_spark_match_duckdb(reports, tmp_path) -> None:
    """The histogram-and-select percentiles are plain Ibis: on Spark they equal DuckDB's."""
    duck, _ = reports
    data = generate(tmp_path, rows=20_000, seed=11)
    config = AuditConfig.of_e2e(
        {"p50": 1300.0, "p95": 2800.0, "p99": 4000.0},
        events=read_events(data.events),
        in_memory_rows=0,
    )
    spark = run_audit(read_log(str(data.log), OPTIONS, engine="pyspark"), config)
    assert any("bounded memory" in n for n in spark.provenance.notes)
    for p in ("p50", "p95", "p99"):
        assert getattr(spark.snapshot, p) == pytest.approx(getattr(duck.snapshot, p), rel=1e-9)
    for a, b in zip(duck.stages, spark.stages, strict=True):
        assert (a.name, a.p99) == (b.name, pytest.approx(b.p99, rel=1e-9))
    assert [(c.value, c.p99) for c in duck.cohorts] == [
        (c.value, pytest.approx(c.p99, rel=1e-9)) for c in spark.cohorts
    ]


def test_same_culprits(reports) -> None:
    duck, spark = reports
    assert duck.culprits and [c.stage for c in duck.culprits] == [c.stage for c in spark.culprits]
    for a, b in zip(duck.culprits, spark.culprits, strict=True):
        assert b.score == pytest.approx(a.score, abs=0.02)
