"""Per-stage windows in the runtime: status, durability through the log and snapshot, bounds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tailbudget.control.stage_windows import MAX_STAGES
from tailbudget.serve.batch import Batch
from tailbudget.serve.ingest import BadBatch, parse_observations
from tailbudget.serve.runtime import SNAPSHOT_VERSION, Runtime
from tailbudget.serve.wal import StageColumn
from tests.control.runtimes import crash, runtime

T0 = 1_800_000_000.0


def _post(rt: Runtime, n: int, t: float, llm_ms: float, db_every: int = 2) -> None:
    items = []
    for i in range(n):
        stages = {"llm": llm_ms + i, **({"db": 5} if i % db_every == 0 else {})}
        items.append({"ts": t, "total_ms": llm_ms + 20 + i, "stages": stages})
    body = "\n".join(json.dumps(item) for item in items).encode()
    batch = parse_observations(body, now_s=T0 + 60)
    rt.ingest(batch)


def test_status_reports_each_stage_over_the_policy_window(tmp_path):
    rt = runtime(tmp_path)
    _post(rt, 100, T0, 300.0)
    _post(rt, 4, T0 - 30, 9000.0)  # outside the 10 s window of T0 + 1: not in the stats
    stages = rt.status(T0 + 1)["stages"]
    assert set(stages) == {"llm", "db"}
    llm, db = stages["llm"], stages["db"]
    assert llm["count"] == 100 and llm["known"] and llm["window_s"] == 10
    assert 340 <= llm["p50"] <= 360 and 385 <= llm["p95"] <= 405 and llm["p95"] <= llm["p99"] < 410
    assert db["count"] == 50 and db["p50"] == pytest.approx(5, rel=0.01)
    assert rt.status(T0 + 1)["stage_observations"] == {"llm": 104, "db": 52}
    # a later window no longer holds them
    assert rt.status(T0 + 30)["stages"]["llm"]["count"] == 0
    rt.close()


def test_stage_windows_survive_a_crash_from_the_log_and_from_the_snapshot(tmp_path):
    rt = runtime(tmp_path)
    _post(rt, 40, T0, 100.0)
    rt.compact()  # in the snapshot
    _post(rt, 60, T0 + 2, 700.0, db_every=3)  # only in the log
    before = rt.status(T0 + 3)
    crash(rt)
    again = runtime(tmp_path)
    after = again.status(T0 + 3)
    assert after["stages"] == before["stages"] and after["stages"]["llm"]["count"] == 100
    assert after["stage_observations"] == before["stage_observations"] == {"llm": 100, "db": 40}
    again.close()


def test_a_snapshot_from_before_stage_windows_still_loads(tmp_path):
    rt = runtime(tmp_path)
    rt.ingest(Batch(np.full(30, T0), np.full(30, 100.0), np.zeros(30, dtype=bool)))
    rt.close()
    snap = rt.state.load_snapshot()
    assert snap is not None and snap["version"] == SNAPSHOT_VERSION and snap["stages"] == {}
    # what version 1 wrote: no stage windows
    del snap["stages"]
    snap["version"] = 1
    snap["stage_observations"] = {"llm": 30}
    rt.state.write_snapshot(snap)
    again = runtime(tmp_path)
    status = again.status(T0 + 1)
    assert status["observations_total"] == 30 and status["window"]["count"] == 30
    assert status["stages"] == {} and status["stage_observations"] == {"llm": 30}
    _post(again, 10, T0 + 1, 50.0)
    assert again.status(T0 + 2)["stages"]["llm"]["count"] == 10
    again.close()


def test_stage_windows_of_another_window_size_start_afresh(tmp_path):
    rt = runtime(tmp_path)
    _post(rt, 20, T0, 100.0)
    rt.close()
    again = runtime(tmp_path, window="20s")  # the budget's policy changed
    assert again.status(T0 + 1)["stages"] == {}
    assert again.status(T0 + 1)["stage_observations"] == {"llm": 20, "db": 10}
    again.close()


def test_too_many_stage_names_are_refused_before_anything_is_written(tmp_path):
    rt = runtime(tmp_path)
    ts, total, err = np.full(1, T0), np.full(1, 10.0), np.zeros(1, dtype=bool)
    one = StageColumn(np.zeros(1, dtype=np.int64), np.ones(1))
    rt.ingest(Batch(ts, total, err, {f"s{i}": one for i in range(MAX_STAGES - 1)}))
    rt.ingest(Batch(ts, total, err, {"s0": one, "last": one}))  # exactly MAX_STAGES
    size = rt.state.wal.size()
    with pytest.raises(
        BadBatch, match=f"{MAX_STAGES + 1} stages in the window; at most {MAX_STAGES}"
    ):
        rt.ingest(Batch(ts, total, err, {"s1": one, "one_too_many": one}))
    assert rt.state.wal.size() == size and rt.observations_total == 2
    # stages whose times left the window make room again
    rt.ingest(Batch(np.full(1, T0 + 60), total, err, {"fresh": one}))
    rt.ingest(Batch(np.full(1, T0 + 60), total, err, {"one_too_many": one}))
    assert set(rt.status(T0 + 61)["stages"]) == {"fresh", "one_too_many"}
    rt.close()


def test_unreadable_stage_windows_restart_empty_and_say_so(tmp_path):
    rt = runtime(tmp_path)
    _post(rt, 20, T0, 100.0)
    rt.close()
    snap = rt.state.load_snapshot()
    assert snap is not None and snap["stages"]["llm"]["slots"]
    snap["stages"]["llm"]["slots"][0]["count"] = "many"
    rt.state.write_snapshot(snap)
    again = runtime(tmp_path)
    status = again.status(T0 + 1)
    assert status["stages"] == {} and status["observations_total"] == 20
    assert "stage windows in the snapshot were unreadable: restarted" in status["notes"]
    again.close()


def test_a_fresh_state_dir_carries_the_snapshot_version_from_the_first_start(tmp_path):
    # An older tailbudget must stop at its version check, not replay a log with stage
    # records it cannot read: the first start writes a snapshot at once.
    rt = runtime(tmp_path)
    snap = rt.state.load_snapshot()
    assert snap is not None and snap["version"] == SNAPSHOT_VERSION == 5
    crash(rt)
    again = runtime(tmp_path)  # a resumed state dir is not compacted at start
    assert again.state.load_snapshot() == snap
    again.close()
