"""The framework's trade as data: fetch 55 ms against a 40 ms slice of a 100 ms p99."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tailbudget.audit.fixes import catalog
from tailbudget.audit.profile import profile_of
from tailbudget.budget.load import parse_budget
from tailbudget.budgeting.proposal import rebudget
from tailbudget.logs import ReadOptions, read_log

P99 = {"feature_fetch": 55.0, "inference": 22.0, "post_processing": 15.0, "network": 15.0}
SLICES = {"feature_fetch": 40, "inference": 30, "post_processing": 15, "network": 15}


def framework_log(tmp_path, n: int = 20_000):
    """Independent lognormal stages rescaled so each p99 is exactly the framework's figure."""
    rng = np.random.default_rng(7)
    cols = {}
    for name, p99 in P99.items():
        x = rng.lognormal(0.0, 0.4, n)
        cols[f"{name}_ms"] = x * p99 / np.quantile(x, 0.99)
    cols["total_ms"] = np.sum(list(cols.values()), axis=0)
    path = tmp_path / "framework.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table(cols), path)
    return path


def framework_budget(headroom: float = 0.0):
    pipeline = "\n".join(f"  - stage: {s}\n    budget: {{p99: {v}}}" for s, v in SLICES.items())
    return parse_budget(
        f"service: scoring\nenvironment: prd\nslo: {{p99: 100}}\nheadroom: {headroom}\n"
        f"pipeline:\n{pipeline}\n"
    )


def run(tmp_path, headroom: float):
    budget = framework_budget(headroom)
    log = read_log(framework_log(tmp_path), ReadOptions.from_budget(budget))
    return rebudget(budget, profile_of(log), catalog(budget.fixes))


def test_inference_room_goes_to_fetch_and_7ms_remain(tmp_path):
    out = run(tmp_path, 0.0)
    assert not out.fits_now
    (alloc,) = out.allocations
    assert alloc.measured_ms == pytest.approx(107.0, abs=0.01)
    assert out.speedup_needed_ms["p99"] == pytest.approx(7.0, abs=0.01)
    changes = {c.stage: c for c in out.changes}
    assert changes["inference"].to["p99"] == pytest.approx(22.0, abs=0.05)
    assert changes["feature_fetch"].to["p99"] == pytest.approx(48.0, abs=0.05)
    assert "needs a speed-up" in changes["feature_fetch"].reason
    assert set(changes) == {"inference", "feature_fetch"}


def test_headroom_asks_for_17ms(tmp_path):
    out = run(tmp_path, 0.1)
    assert out.speedup_needed_ms["p99"] == pytest.approx(17.0, abs=0.01)
    changes = {c.stage: c for c in out.changes}
    assert changes["feature_fetch"].to["p99"] == pytest.approx(38.0, abs=0.05)


def test_options_are_priced_from_the_catalog(tmp_path):
    out = run(tmp_path, 0.0)
    cat = catalog({})
    by = {(o.fix, o.stages): o for o in out.options}
    fetch = [o for (fix, st), o in by.items() if st == ("feature_fetch",)]
    assert fetch, "a faster fetch is offered"
    model = by[("smaller_model", ("inference",))]
    assert model.hours == cat["smaller_model"].hours
    assert model.saved_ms["p99"] == pytest.approx(22.0 * 0.4, rel=0.01)
    for o in out.options:
        assert o.hours == cat[o.fix].hours
        assert o.score == pytest.approx(o.saved_ms["p99"] / o.hours, rel=1e-3)
    chosen = [o for o in out.options if o.chosen]
    assert chosen and out.closes_gap


def test_proposed_budget_reads_back_and_fits(tmp_path):
    from tailbudget.budget.plan import make_plan

    out = run(tmp_path, 0.1)
    proposed = parse_budget(out.budget_text)
    assert make_plan(proposed, samples=20_000).fits
    assert "feature_fetch" in out.diff


def test_parallelizing_equals_the_per_request_max(tmp_path):
    out = run(tmp_path, 0.0)
    log = read_log(framework_log(tmp_path), ReadOptions())
    t = log.table.to_pyarrow()
    pair = next(o for o in out.options if o.fix == "parallelize_stages")
    a, b = pair.stages
    x, y = (t.column(f"{s}_ms").to_numpy() for s in (a, b))
    direct = np.quantile(np.maximum(x, y), 0.99)
    expected = np.quantile(x, 0.99) + np.quantile(y, 0.99) - direct
    assert pair.saved_ms["p99"] == pytest.approx(expected, abs=1e-3)


def test_a_model_stage_is_never_run_beside_its_neighbours(tmp_path):
    # Inference reads the fetched features and feeds post-processing: uncorrelated
    # times do not make them independent steps.
    out = run(tmp_path, 0.0)
    pairs = [o.stages for o in out.options if o.fix == "parallelize_stages"]
    assert pairs and all("inference" not in p for p in pairs)
