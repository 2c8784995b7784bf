"""The audit of a log larger than the engine's memory limit: exact figures, same findings,
and nothing left behind."""

from __future__ import annotations

import json
import os

import pytest

from tailbudget.audit import AuditConfig, run_audit
from tailbudget.audit.events import read_events
from tailbudget.demo import planted as synth
from tailbudget.demo.generate import generate
from tailbudget.errors import LogError
from tailbudget.logs import ReadOptions, read_log
from tailbudget.logs.engine import MEMORY_LIMIT_ENV, connect

OPTIONS = ReadOptions(timestamp="ts", shape=("output_tokens",), cohorts=("route",), error="error")
SLO = {"p50": 1300.0, "p95": 2800.0, "p99": 4000.0}


def _figures(report) -> dict:
    out = json.loads(report.to_json())
    out.pop("provenance")
    return out


def _same(a: object, b: object, where: str) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9), where
    else:
        assert a == b, where


@pytest.mark.parametrize(
    ("make", "extra"),
    [(synth.cold_start, {"events": tuple(synth.EVENTS)}), (synth.input_shape, {})],
)
def test_bounded_method_gives_the_same_report(make, extra) -> None:
    slo = {"p50": 900.0, "p95": 1100.0, "p99": 1500.0}
    whole = run_audit(make(), AuditConfig.of_e2e(slo, **extra))
    bounded = run_audit(make(), AuditConfig.of_e2e(slo, in_memory_rows=0, **extra))
    _same(_figures(bounded), _figures(whole), "report")
    assert any("bounded memory" in n for n in bounded.provenance.notes)
    assert any("every value" in n for n in whole.provenance.notes)


@pytest.fixture(scope="module")
def big_log(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("ooc"), rows=600_000, seed=5)


def test_audit_fits_a_memory_limit_its_quantiles_would_not(big_log, monkeypatch) -> None:
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "32MB")
    events = read_events(big_log.events)
    report = run_audit(read_log(str(big_log.log), OPTIONS), AuditConfig.of_e2e(SLO, events=events))
    assert {"cold_start", "cache_miss", "external_dependency"} <= {
        h.kind for h in report.hypotheses
    }
    assert report.cold_start is not None and report.cold_start.n_cold > 0
    # The engine's own exact quantile needs every value in memory: under this limit it fails.
    with pytest.raises(Exception, match=r"(?i)out of memory"):
        run_audit(
            read_log(str(big_log.log), OPTIONS),
            AuditConfig.of_e2e(SLO, events=events, in_memory_rows=10**9),
        )


def test_scratch_copy_is_gone_after_the_audit(big_log, tmp_path, monkeypatch) -> None:
    import tempfile

    # A private temp folder: other runs sharing /tmp cannot leave their scratch files here.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    log = read_log(str(big_log.log), OPTIONS)
    run_audit(log, AuditConfig.of_e2e(SLO))
    names = log.backend.raw_sql("SELECT database_name FROM duckdb_databases()").fetchall()
    assert not any("scratch" in n for (n,) in names)
    assert not [f for f in os.listdir(tmp_path) if f.startswith("tailbudget-scratch")]


def test_memory_limit_from_the_environment(monkeypatch) -> None:
    def limit() -> str:
        return str(connect().raw_sql("SELECT current_setting('memory_limit')").fetchone()[0])

    assert limit() in ("953.6 MiB", "1.0 GiB", "1000.0 MiB")
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "256MB")
    assert limit() in ("244.1 MiB", "256.0 MiB")
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "lots")
    with pytest.raises(LogError, match="TAILBUDGET_MEMORY_LIMIT='lots' is not a memory size"):
        connect()


def test_cohorts_and_their_p99s_in_one_pass_for_all_dimensions(big_log, monkeypatch) -> None:
    # Three cohort dimensions whose values combine into few groups: one counting pass and
    # one bracket-counting pass for all of them, with the figures of the engine's quantile.
    from tailbudget.audit import cohorts, context

    monkeypatch.setattr(context, "SAMPLE_ROWS", 50_000)
    options = OPTIONS.with_(cohorts=("route", "model_variant", "region"))
    labels: list[str] = []
    bounded = run_audit(
        read_log(str(big_log.log), options), AuditConfig.of_e2e(SLO, progress=labels.append)
    )
    assert "cohorts" in labels and "cohort route" not in labels, labels
    assert "cohort p99: bracket counts" in labels, labels
    # Against one counting pass per dimension and the engine's own quantile.
    monkeypatch.setattr(cohorts, "MOST_COMBINATIONS", 0)
    labels.clear()
    whole = run_audit(
        read_log(str(big_log.log), options),
        AuditConfig.of_e2e(SLO, in_memory_rows=10**9, progress=labels.append),
    )
    assert "cohort route" in labels, labels
    assert {c.dim for c in bounded.cohorts} == {"route", "model_variant", "region"}
    _same(_figures(bounded), _figures(whole), "report")


def test_two_audits_of_one_log_give_one_report(big_log) -> None:
    """The sample's approximate quantiles and the per-minute p99 do not depend on
    how DuckDB's threads happened to finish: the same log, the same JSON."""
    events = read_events(big_log.events)
    reports = [
        json.loads(
            run_audit(
                read_log(str(big_log.log), OPTIONS), AuditConfig.of_e2e(SLO, events=events)
            ).to_json()
        )
        for _ in range(2)
    ]
    for r in reports:
        r["provenance"].pop("generated_at")
    _same(reports[0], reports[1], "report")


def test_the_per_minute_p99_is_within_one_percent(big_log) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    from tailbudget.audit.cold_start import TIMELINE_ACCURACY

    events = read_events(big_log.events)
    report = run_audit(read_log(str(big_log.log), OPTIONS), AuditConfig.of_e2e(SLO, events=events))
    assert report.cold_start is not None
    raw = pq.read_table(big_log.log, columns=["ts", "total_ms"])
    ts = raw.column("ts").cast("int64").to_numpy() // 1_000_000  # microseconds
    minute = ts // 60
    total = raw.column("total_ms").to_numpy()
    points = {p.t: p for p in report.cold_start.timeline}
    checked = 0
    for m in np.unique(minute)[:: max(1, len(np.unique(minute)) // 20)]:
        from datetime import UTC, datetime

        key = datetime.fromtimestamp(int(m) * 60, tz=UTC).isoformat().replace("+00:00", "Z")
        want = float(np.quantile(total[minute == m], 0.99))
        got = points[key]
        assert got.n == int((minute == m).sum())
        # bucket error, plus one rank's step of the sample quantile between neighbours
        assert got.p99 == pytest.approx(want, rel=TIMELINE_ACCURACY * 1.05 + 0.01), key
        checked += 1
    assert checked >= 10


def test_growth_after_the_last_event_is_the_change_of_the_stage_means(big_log) -> None:
    """Read off the slow-vs-fast sums (grouped by side of the cut as well), the growth of
    each culprit is its mean after the last event minus its mean before, as NumPy says."""
    import numpy as np
    import pyarrow.parquet as pq

    events = read_events(big_log.events)
    report = run_audit(read_log(str(big_log.log), OPTIONS), AuditConfig.of_e2e(SLO, events=events))
    raw = pq.read_table(big_log.log)
    ts_s = raw.column("ts").cast("int64").to_numpy() / 1e6
    span = (np.floor(ts_s.min() / 60) * 60, (np.floor(ts_s.max() / 60) + 1) * 60)
    cut = max(w.timestamp() for w, _ in events if span[0] < w.timestamp() < span[1])
    after = ts_s >= cut
    checked = 0
    for culprit in report.culprits:
        if "growth_ms" not in culprit.figures or culprit.stage == "unattributed":
            continue
        y = raw.column(f"{culprit.stage}_ms").to_numpy()
        want = y[after].mean() - y[~after].mean()
        assert culprit.figures["growth_ms"] == pytest.approx(want, rel=1e-9, abs=1e-9)
        checked += 1
    assert checked


def test_the_per_minute_stage_means_are_numpys(big_log) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    from tailbudget.audit import cold_start
    from tailbudget.audit.context import Ctx

    log = read_log(str(big_log.log), OPTIONS)
    rows = cold_start.timeline(Ctx(log, AuditConfig.of_e2e(SLO)), ["llm", "total_ms"])
    raw = pq.read_table(big_log.log, columns=["ts", "llm_ms", "total_ms"])
    minute = raw.column("ts").cast("int64").to_numpy() // 60_000_000
    llm, total = raw.column("llm_ms").to_numpy(), raw.column("total_ms").to_numpy()
    assert [r["minute"] for r in rows] == sorted(np.unique(minute).tolist())
    for r in rows[:: max(1, len(rows) // 25)]:
        mine = minute == r["minute"]
        assert r["n"] == int(mine.sum())
        assert r["m0"] == pytest.approx(llm[mine].mean(), rel=1e-9)
        assert r["m1"] == pytest.approx(total[mine].mean(), rel=1e-9)


def test_the_audit_reads_its_results_without_pandas(tmp_path) -> None:
    """Arrow results are read from their buffers: pandas (half a second to import) is never
    loaded by an audit."""
    import subprocess
    import sys

    log = generate(tmp_path, rows=20_000, seed=3)
    code = (
        "import sys\n"
        "from tailbudget.audit import AuditConfig, run_audit\n"
        "from tailbudget.audit.events import read_events\n"
        "from tailbudget.logs import ReadOptions, read_log\n"
        "o = ReadOptions(timestamp='ts', shape=('output_tokens',), cohorts=('route',))\n"
        f"log = read_log({str(log.log)!r}, o)\n"
        f"ev = read_events(__import__('pathlib').Path({str(log.events)!r}))\n"
        "run_audit(log, AuditConfig.of_e2e({'p99': 4000.0}, events=ev, in_memory_rows=0))\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_large_log_without_cohort_dimensions(big_log) -> None:
    # The cohort step asks for no grouped percentile: no pass, no cohort rows (this
    # crashed when a log too large for the engine's quantile named no cohort column).
    options = OPTIONS.with_(cohorts=())
    report = run_audit(read_log(str(big_log.log), options), AuditConfig.of_e2e(SLO))
    assert report.cohorts == []
    assert report.snapshot.p99 > 0
